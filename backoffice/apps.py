from __future__ import annotations

from django.apps import AppConfig
from django.contrib.admin import apps as admin_apps


class BackofficeConfig(AppConfig):
    """The admin layer: every ModelAdmin, the tenancy gate, operators' actions, CSV export and
    the queue-health dashboard. It sits on top of the product apps and no app imports it."""

    default = True
    name = "backoffice"


class BackofficeAdminConfig(admin_apps.AdminConfig):
    """django.contrib.admin with the product's site as the default one (backoffice/site.py)."""

    default = False  # named in INSTALLED_APPS by its path
    default_site = "backoffice.site.BackofficeSite"
