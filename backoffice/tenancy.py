"""The tenancy gate every admin extends: what a user who is not a superuser may list, open,
change or choose is limited to the organizations they are a member of (OrganizationScopedAdmin),
and a platform's records (permission groups, the beat schedule) are for superusers only
(SuperuserOnlyAdmin, applied by the site as those apps register: backoffice/site.py).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import get_fields_from_path
from django.db.models import Model, Q, QuerySet
from django.http import Http404, HttpRequest

from outreach.models import Organization

APPROVE_PERMISSION = "outreach.approve_outreach"


SETTINGS_PERMISSION = "outreach.change_organization_settings"


def scoped_rows(*, request: HttpRequest, model: type[Model]) -> QuerySet[Any] | None:
    """The rows of `model` this user may see: what its admin lists to them, when that admin is
    scoped (None: the model has no tenancy, e.g. auth groups). Every choice of a related row,
    in a filter sidebar, a form widget or the autocomplete endpoint, is drawn from here."""
    related_admin = admin.site._registry.get(model)
    if isinstance(related_admin, OrganizationScopedAdmin):
        return related_admin.get_queryset(request)
    return None


class OrganizationScopedRelatedFilter(admin.RelatedFieldListFilter):
    """A related-field filter whose choices are only the related rows the user may see."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: admin.ModelAdmin) -> Any:
        rows = scoped_rows(request=request, model=field.related_model)
        if rows is None or request.user.is_superuser:
            return super().field_choices(field, request, model_admin)
        ordering = self.field_admin_ordering(field, request, model_admin)
        return field.get_choices(
            include_blank=False, ordering=ordering, limit_choices_to={"pk__in": rows.values("pk")}
        )


class OrganizationScopedAdmin(admin.ModelAdmin):
    """THE tenancy gate: everything an admin page lists, searches, filters by, offers in a form
    widget or the autocomplete endpoint, opens, changes or acts on, limited for a user who is
    not a superuser to the organizations they are a member of (Organization.members).

    `organization_path` is the lookup from the model to its Organization (a tuple: any of
    several, e.g. a user is visible through membership or through the owner it logs in as).
    get_queryset is the one gate: views, search, bulk actions, history and the autocomplete
    endpoint read through it, and the choices of related rows (filter sidebars via
    OrganizationScopedRelatedFilter, form widgets via formfield_for_*) are the related model's
    own admin's get_queryset (scoped_rows). An object of another organization is a 404, as if
    it did not exist, so nothing can be seen in, or moved into, another organization.
    """

    organization_path: str | tuple[str, ...] = "organization"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = super().get_queryset(request)
        if request.user.is_superuser:
            return rows
        paths = self.organization_path
        if isinstance(paths, str):
            # One membership row per (organization, user): the join cannot repeat a row.
            return rows.filter(**{self._members_lookup(paths): request.user.pk})
        # Several paths (some many-valued) would repeat rows in a join: a subquery of keys.
        anyway = Q()
        for path in paths:
            anyway |= Q(**{self._members_lookup(path): request.user.pk})
        return rows.filter(pk__in=self.model._default_manager.filter(anyway).values("pk"))

    @staticmethod
    def _members_lookup(path: str) -> str:
        return f"{path}__members" if path else "members"

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        found = super().get_object(request, object_id, from_field)
        if found is None and self._elsewhere(request, object_id):
            raise Http404("Not found in your organizations.")
        return found

    def _elsewhere(self, request: HttpRequest, object_id: str) -> bool:
        """It exists, outside the user's organizations (anything else keeps the admin's "perhaps
        it was deleted" redirect)."""
        try:
            return self.model._default_manager.filter(pk=int(object_id)).exists()
        except ValueError:
            return False

    def get_list_filter(self, request: HttpRequest) -> Any:
        return [self._scoped_filter(spec) for spec in super().get_list_filter(request)]

    def _scoped_filter(self, spec: Any) -> Any:
        if not isinstance(spec, str):
            return spec  # a filter class or (field, class) chosen on purpose
        field = get_fields_from_path(self.model, spec)[-1]
        return (spec, OrganizationScopedRelatedFilter) if field.is_relation else spec

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        self._scope_choices(db_field, request, kwargs)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        self._scope_choices(db_field, request, kwargs)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def _scope_choices(self, db_field: Any, request: HttpRequest, kwargs: dict[str, Any]) -> None:
        # The choices also validate the POST: a forged id of another organization's row fails.
        rows = (
            None if request.user.is_superuser else scoped_rows(request=request, model=db_field.related_model)
        )
        if rows is not None:
            kwargs["queryset"] = rows


class SuperuserOnlyAdmin(admin.ModelAdmin):
    """A platform's records, no tenant's: permission groups (a group grants permissions in
    every organization) and the beat schedule (it drives every tenant's work)."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


class TenantUsers(OrganizationScopedAdmin):
    """Users, for a tenant: the members of their organizations and their owners' logins. A
    user in no organization (a platform operator) is nobody's tenant and shows to superusers
    only; so do the fields that grant power beyond one organization."""

    organization_path = ("organizations", "owner__organization")
    escalation_fields = ("is_superuser", "groups", "user_permissions")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = tuple(super().get_readonly_fields(request, obj))
        return readonly if request.user.is_superuser else (*readonly, *self.escalation_fields)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Also the password reset (UserAdmin.user_change_password asks this).
        return super().has_change_permission(request, obj) and self._all_theirs(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Also each row of the bulk delete (Django asks per object).
        return super().has_delete_permission(request, obj) and self._all_theirs(request, obj)

    @staticmethod
    def _all_theirs(request: HttpRequest, user: Any) -> bool:
        """A tenant's power over an account ends where the tenant ends: a superuser, or someone
        who also belongs to another organization (a member, or the login of its owner), may be
        seen as a colleague but is changed, reset or deleted only by a superuser."""
        if user is None or request.user.is_superuser:
            return True
        if user.is_superuser:
            return False
        theirs = set(
            Organization.objects.filter(Q(members=user.pk) | Q(owners__user=user.pk)).values_list(
                "pk", flat=True
            )
        )
        mine = set(Organization.objects.filter(members=request.user.pk).values_list("pk", flat=True))
        return theirs <= mine

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change and not request.user.is_superuser:
            # A user a tenant adds is their colleague: a member of their organizations (without
            # it the new user would vanish from the tenant's own user list at once).
            obj.organizations.add(*Organization.objects.filter(members=request.user.pk))


# Apps whose records belong to the platform, not to a tenant (users excepted: TenantUsers).
PLATFORM_APPS = ("auth", "django_celery_beat")
