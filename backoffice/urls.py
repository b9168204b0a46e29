"""Mounted by config/urls.py BEFORE admin.site.urls (the admin's catch-all would take
/admin/queue-health/ otherwise):  path("", include("backoffice.urls")),"""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

from backoffice import views

app_name = "orchestrator"

urlpatterns = [
    path("admin/queue-health/", admin.site.admin_view(views.queue_health_page), name="queue-health"),
    path("metrics", views.metrics, name="metrics"),
]
