from __future__ import annotations

from django.urls import path

from nurture import views

app_name = "nurture"

urlpatterns = [
    path("hooks/replies/", views.replies_webhook, name="replies_webhook"),
    # The List-Unsubscribe header of every email points here (nurture.mail.transport.unsubscribe_url).
    path("unsubscribe/<str:token>/", views.unsubscribe, name="unsubscribe"),
]
