from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    # Before admin/: the queue-health dashboard lives under /admin/queue-health/.
    path("", include("orchestrator.urls")),
    path("admin/", admin.site.urls),
    path("", include("nurture.urls")),
]
