from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    # Before admin/: the queue-health dashboard lives under /admin/queue-health/.
    path("", include("backoffice.urls")),
    path("admin/", admin.site.urls),
    path("", include("nurture.urls")),
]

# Email providers' webhooks (django-anymail): /hooks/anymail/<provider>/inbound/ feeds replies
# into nurture.intake.replies (receivers connected in nurture/apps.py); tracking URLs live here
# too. Mounted only with ANYMAIL_WEBHOOK_SECRET set: every call must then carry that HTTP basic
# auth, and each provider's own signature where it has one. Without it they would be open to
# anyone on the web (anymail only warns), so they do not exist. Under hooks/: no HTTPS redirect.
if settings.ANYMAIL.get("WEBHOOK_SECRET"):
    urlpatterns.append(path("hooks/anymail/", include("anymail.urls")))
