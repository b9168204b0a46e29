"""Admin of the records: the tenancy gate every admin extends (OrganizationScopedAdmin), owners,
outreach, the approval queue for reviewers, and users (scoped like the rest). Actions call
services and declare the permission they need.

Admins whose actions belong to an upper app live in that app and extend the gate from here, so
this bottom layer imports none of them: leads ("Mark converted" stops a sequence) in
nurture/admin.py; organizations (their LLM caps are the budget's rules) and dead letters in
orchestrator/admin.py.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import Model, Q, QuerySet
from django.http import Http404, HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from outreach import services
from outreach.admin_actions import OutreachActions, admin_user, reject_with_reason
from outreach.compliance import footer_block
from outreach.csv_export import CsvExportAdmin
from outreach.draft_policy import check_draft
from outreach.models import MIDNIGHT, DraftForApproval, Organization, Outreach, OutreachEvent, Owner, State
from outreach.transitions import TransitionLost

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


class OwnerForm(forms.ModelForm):
    # No Meta: the admin builds it from OwnerAdmin (model and fields).

    def clean(self) -> dict[str, Any]:
        # The database refuses it too (owner_hours_order); this says so in words, on the field.
        data = super().clean() or self.cleaned_data
        start, end = data.get("hours_start"), data.get("hours_end")
        if start is not None and end is not None and start >= end and end != MIDNIGHT:
            self.add_error(
                "hours_end",
                "Operating hours must end after they start, e.g. 09:00-17:00 (an end of 00:00 is "
                "midnight: 00:00-00:00 is round the clock).",
            )
        return data


@admin.register(Owner)
class OwnerAdmin(OrganizationScopedAdmin):
    form = OwnerForm
    list_display = (
        "name",
        "kind",
        "organization",
        "daily_limit",
        "hours_start",
        "hours_end",
        "working_days",
        "timezone",
        "review_required",
        "weight",
        "active",
    )
    list_filter = ("kind", "review_required", "active", "organization")
    search_fields = ("name",)
    REVIEW_AUDIT = ("review_disabled_by", "review_disabled_at", "review_disabled_via")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # Turning review off lets drafts go out unread: only an approver may. Without the
        # permission the box is read-only while it is ticked (ticking it stays open to all).
        # An owner's weight is its share of the shared LLM budget: an organization-wide setting.
        locked = obj is not None and obj.review_required and not request.user.has_perm(APPROVE_PERMISSION)
        return (
            *super().get_readonly_fields(request, obj),
            *self.REVIEW_AUDIT,
            *(("review_required",) if locked else ()),
            *(() if request.user.has_perm(SETTINGS_PERMISSION) else ("weight",)),
        )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        was_required = change and Owner.objects.filter(pk=obj.pk, review_required=True).exists()
        services.owner_review_record(
            owner=obj, was_required=was_required, by=admin_user(request), via="admin"
        )
        super().save_model(request, obj, form, change)


class OutreachEventInline(admin.TabularInline):
    model = OutreachEvent
    extra = 0
    can_delete = False
    fields = ("at", "from_state", "to_state", "attempt", "error_class", "note", "actor")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The history is part of the outreach: whoever may read it reads why it moved (e.g. an
        # expired draft's "expired: ..."), without a separate permission on the event rows.
        return request.user.has_perm("outreach.view_outreach") or super().has_view_permission(request, obj)


@admin.register(Outreach)
class OutreachAdmin(CsvExportAdmin, OutreachActions, OrganizationScopedAdmin):
    organization_path = "owner__organization"
    export_fields = (
        "id",
        "kind",
        "state",
        "owner__name",
        "lead__email",
        "draft_subject",
        "not_before",
        "attempts",
        "error_class",
        "blocked_reason",
        "state_changed_at",
        "sent_at",
        "created_at",
    )
    list_display = (
        "id",
        "kind",
        "tier",
        "state",
        "owner",
        "lead",
        "not_before",
        "attempts",
        "waiting_because",
    )
    list_filter = ("state", "tier", "kind", "owner", "error_class")
    search_fields = ("lead__email", "idempotency_key", "message_id", "esp_message_id")
    list_select_related = ("owner", "lead")
    # The state machine owns state and everything it writes: read-only here.
    readonly_fields = [f.name for f in Outreach._meta.fields]
    inlines = [OutreachEventInline]
    # Drafts can be long: keep them out of the list query.
    defer_fields = ("draft_body", "context", "last_error")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Outreach]:
        return super().get_queryset(request).defer(*self.defer_fields)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description="Why waiting")
    def waiting_because(self, obj: Outreach) -> str:
        if obj.state == State.APPROVED:  # held back by the send budget (rate, sender domain's day)
            return obj.blocked_reason
        if obj.state != State.QUEUED:
            return ""
        if obj.blocked_reason:
            return obj.blocked_reason
        if obj.not_before > timezone.now():
            return f"not before {obj.not_before:%Y-%m-%d %H:%M} UTC"
        return "ready: waiting for a slot"


class DraftForm(forms.ModelForm):
    """The reviewer's edit: an approved email passes outreach.draft_policy.check_draft (a reject needs nothing)."""

    # No Meta: the admin builds it from ApprovalQueueAdmin.fields (less its read-only ones).

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        if "_reject" in self.data or self.has_error("draft_subject") or self.has_error("draft_body"):
            return data
        # The reviewer's words pass the same policy as the model's (one-line subject included:
        # it becomes a header, and a line break would inject headers).
        for violation in check_draft(
            subject=data.get("draft_subject") or "",
            body=data.get("draft_body") or "",
            allowed_domains=self.instance.lead.organization.allowed_link_domains,
            allow_phone_numbers=self.instance.lead.organization.allow_phone_numbers,
        ):
            part, _, reason = violation.partition(": ")
            self.add_error(f"draft_{part}" if f"draft_{part}" in self.fields else None, reason)
        return data


@admin.register(DraftForApproval)
class ApprovalQueueAdmin(OrganizationScopedAdmin):
    """Only users holding outreach.approve_outreach see this; everyone else gets 403. And only
    drafts of owners in their organizations (OrganizationScopedAdmin)."""

    organization_path = "owner__organization"
    form = DraftForm

    list_display = ("subject_line", "preview", "lead_who", "company", "owner", "kind", "waiting_for")
    list_filter = ("owner", "kind")
    search_fields = ("lead__email", "draft_subject", "lead__company")
    list_select_related = ("owner", "lead")
    ordering = ("state_changed_at", "id")
    fields = ("lead_context", "owner", "kind", "draft_subject", "draft_body", "footer_at_send")
    readonly_fields = ("lead_context", "owner", "kind", "footer_at_send")
    actions = ("approve_selected", "reject_selected")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Outreach]:
        return super().get_queryset(request).filter(state=State.AWAITING_APPROVAL)

    def _elsewhere(self, request: HttpRequest, object_id: str) -> bool:
        # Only a waiting draft is "elsewhere"; one someone just approved keeps the redirect.
        try:
            return DraftForApproval.objects.filter(pk=int(object_id), state=State.AWAITING_APPROVAL).exists()
        except ValueError:
            return False

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(APPROVE_PERMISSION)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(APPROVE_PERMISSION)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm(APPROVE_PERMISSION)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Subject")
    def subject_line(self, obj: Outreach) -> str:
        return obj.draft_subject or "(no subject)"

    @admin.display(description="Draft")
    def preview(self, obj: Outreach) -> str:
        # The first words of the body: enough to triage from the list without opening each draft.
        text = " ".join(obj.draft_body.split())
        text = text if len(text) <= 120 else text[:119].rstrip() + "\u2026"
        # A readable column width: without it the table squeezes the preview to a word per line.
        return format_html('<span style="display:inline-block;min-width:14em;max-width:24em">{}</span>', text)

    @admin.display(description="Lead", ordering="lead__email")
    def lead_who(self, obj: Outreach) -> str:
        lead = obj.lead
        return format_html("{} {}<br><small>{}</small>", lead.first_name, lead.last_name, lead.email)

    @admin.display(description="Company")
    def company(self, obj: Outreach) -> str:
        return obj.lead.company

    @admin.display(description="Waiting for")
    def waiting_for(self, obj: Outreach) -> str:
        minutes = int((timezone.now() - obj.state_changed_at).total_seconds() // 60)
        return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"

    @admin.display(description="Lead")
    def lead_context(self, obj: Outreach) -> str:
        lead = obj.lead
        return format_html(
            "{} {} &lt;{}&gt;<br>{} at {}<br>time zone {}",
            lead.first_name,
            lead.last_name,
            lead.email,
            lead.title or "(no title)",
            lead.company or "(no company)",
            lead.timezone,
        )

    @admin.display(description="Added below at send time")
    def footer_at_send(self, obj: Outreach) -> str:
        # The reviewer approves the whole email: the organization's compliance footer is not
        # part of the draft (the model never writes it) but goes out below it.
        block = footer_block(footer=obj.lead.organization.compliance_footer)
        if not block:
            return "(nothing: the organization has no compliance footer)"
        return format_html('<pre style="white-space:pre-wrap;margin:0">{}</pre>', block)

    def save_model(self, request: HttpRequest, obj: Outreach, form: Any, change: bool) -> None:
        # The form already wrote its edits onto `obj`; the service compares against the stored
        # draft to record "edited and approved", so hand it the row as stored.
        stored = Outreach.objects.get(pk=obj.pk)
        try:
            if "_reject" in request.POST:
                services.draft_reject(outreach=stored, by=admin_user(request))
            else:
                services.draft_approve(
                    outreach=stored,
                    by=admin_user(request),
                    subject=form.cleaned_data.get("draft_subject"),
                    body=form.cleaned_data.get("draft_body"),
                )
        except TransitionLost:
            self.message_user(request, "Someone else already handled this draft.", messages.WARNING)

    @admin.action(description="Approve selected drafts", permissions=["change"])
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[Outreach]) -> None:
        by, done, skipped = admin_user(request), 0, 0
        for outreach in queryset:
            try:
                services.draft_approve(outreach=outreach, by=by)
                done += 1
            except TransitionLost:
                skipped += 1
        self.message_user(request, f"{done} draft(s) approved; {skipped} already handled by someone else.")

    @admin.action(description="Reject selected drafts with a reason", permissions=["reject"])
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[Outreach]) -> Any:
        return reject_with_reason(self, request, queryset)

    def has_reject_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("outreach.reject_outreach")


User = get_user_model()


class TenantUserAdmin(OrganizationScopedAdmin, UserAdmin):
    """Users, for a tenant: the members of their organizations and their owners' logins. A
    user in no organization (a platform operator) is nobody's tenant and shows to superusers
    only; so do the fields that grant power beyond one organization."""

    organization_path = ("organizations", "owner__organization")
    escalation_fields = ("is_superuser", "groups", "user_permissions")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = tuple(super().get_readonly_fields(request, obj))
        return readonly if request.user.is_superuser else (*readonly, *self.escalation_fields)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        super().save_model(request, obj, form, change)
        if not change and not request.user.is_superuser:
            # A user a tenant adds is their colleague: a member of their organizations (without
            # it the new user would vanish from the tenant's own user list at once).
            obj.organizations.add(*Organization.objects.filter(members=request.user.pk))


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, TenantUserAdmin)


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


PLATFORM_APPS = ("auth", "django_celery_beat")


def platform_admins_for_superusers_only() -> None:
    """Wrap each admin of PLATFORM_APPS (registered before ours: INSTALLED_APPS order) so that
    only superusers reach it, keeping its own lists and forms. Users are not platform records:
    TenantUserAdmin scopes them."""
    for model, model_admin in list(admin.site._registry.items()):
        if model._meta.app_label not in PLATFORM_APPS or isinstance(model_admin, OrganizationScopedAdmin):
            continue
        wrapped = type(
            f"SuperuserOnly{type(model_admin).__name__}", (SuperuserOnlyAdmin, type(model_admin)), {}
        )
        admin.site.unregister(model)
        admin.site.register(model, wrapped)


platform_admins_for_superusers_only()
