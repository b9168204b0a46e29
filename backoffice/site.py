"""The product's admin site. Django's own apps register their admins on it as usual; the site
decides, once and as each registers, what a tenant may reach:

- a platform's records (PLATFORM_APPS: permission groups, the beat schedule) are for
  superusers only: their admin is registered with SuperuserOnlyAdmin in front of it;
- users are scoped like every tenant record: the user model's admin (auth's UserAdmin) is
  registered with TenantUsers in front of it.

Nothing is unregistered or re-wrapped after registration, and no order of INSTALLED_APPS matters.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import Model
from django.db.models.base import ModelBase

from backoffice.tenancy import PLATFORM_APPS, OrganizationScopedAdmin, SuperuserOnlyAdmin, TenantUsers


class BackofficeSite(admin.AdminSite):
    def register(
        self,
        model_or_iterable: type[Model] | Iterable[type[Model]],
        admin_class: type[admin.ModelAdmin] | None = None,
        **options: Any,
    ) -> None:
        models = [model_or_iterable] if isinstance(model_or_iterable, ModelBase) else model_or_iterable
        for model in models:
            super().register(model, self._admin_for(model, admin_class or admin.ModelAdmin), **options)

    @staticmethod
    def _admin_for(model: type[Model], admin_class: type[admin.ModelAdmin]) -> type[admin.ModelAdmin]:
        if model is get_user_model():
            return type(f"Tenant{admin_class.__name__}", (TenantUsers, admin_class), {})
        if model._meta.app_label in PLATFORM_APPS and not issubclass(admin_class, OrganizationScopedAdmin):
            return type(f"SuperuserOnly{admin_class.__name__}", (SuperuserOnlyAdmin, admin_class), {})
        return admin_class
