"""Admin of the records: the tenancy gate every admin extends (OrganizationScopedAdmin), owners,
outreach, and the approval queue for reviewers. Actions call services.

Admins whose actions belong to an upper app live in that app and extend the gate from here, so
this bottom layer imports none of them: leads ("Mark converted" stops a sequence) in
nurture/admin.py; organizations (their LLM caps are the budget's rules) and dead letters in
orchestrator/admin.py.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet
from django.http import Http404, HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from outreach import services
from outreach.draft_policy import check_draft
from outreach.models import DraftForApproval, Organization, Outreach, OutreachEvent, Owner, State
from outreach.transitions import TransitionLost

APPROVE_PERMISSION = "outreach.approve_outreach"


def admin_user(request: HttpRequest) -> AbstractBaseUser:
    """The user acting in an admin view (for services that record who did it)."""
    # Admin views only run for authenticated staff; the permission check already passed.
    assert isinstance(request.user, AbstractBaseUser)
    return request.user


class OrganizationScopedAdmin(admin.ModelAdmin):
    """Everything an admin page lists, opens, changes or acts on, limited for a user who is not
    a superuser to the organizations they are a member of (Organization.members).

    `organization_path` is the lookup from the model to its Organization. Every view, bulk
    action and history page reads through get_queryset, so that is the one gate; an object of
    another organization is a 404, as if it did not exist. Choices of an organization or an
    owner in forms are limited the same way, so nothing can be moved into another organization.
    """

    organization_path = "organization"

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        rows = super().get_queryset(request)
        if request.user.is_superuser:
            return rows
        # One membership row per (organization, user): the join cannot repeat a row.
        return rows.filter(**{self._members_lookup(self.organization_path): request.user.pk})

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

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if not request.user.is_superuser and db_field.related_model in (Organization, Owner):
            path = "" if db_field.related_model is Organization else "organization"
            kwargs["queryset"] = db_field.related_model._default_manager.filter(
                **{self._members_lookup(path): request.user.pk}
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class OwnerForm(forms.ModelForm):
    # No Meta: the admin builds it from OwnerAdmin (model and fields).

    def clean(self) -> dict[str, Any]:
        # The database refuses it too (owner_hours_order); this says so in words, on the field.
        data = super().clean() or self.cleaned_data
        start, end = data.get("hours_start"), data.get("hours_end")
        if start is not None and end is not None and start >= end:
            self.add_error("hours_end", "Operating hours must end after they start, e.g. 09:00-17:00.")
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
        locked = obj is not None and obj.review_required and not request.user.has_perm(APPROVE_PERMISSION)
        return (
            *super().get_readonly_fields(request, obj),
            *self.REVIEW_AUDIT,
            *(("review_required",) if locked else ()),
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


@admin.register(Outreach)
class OutreachAdmin(OrganizationScopedAdmin):
    organization_path = "owner__organization"
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
    search_fields = ("lead__email", "idempotency_key", "message_id")
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
    fields = ("lead_context", "owner", "kind", "draft_subject", "draft_body")
    readonly_fields = ("lead_context", "owner", "kind")
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

    @admin.action(description="Approve selected drafts")
    def approve_selected(self, request: HttpRequest, queryset: QuerySet[Outreach]) -> None:
        self._bulk(request, queryset, approve=True)

    @admin.action(description="Reject selected drafts")
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[Outreach]) -> None:
        self._bulk(request, queryset, approve=False)

    def _bulk(self, request: HttpRequest, queryset: QuerySet[Outreach], *, approve: bool) -> None:
        by, done, skipped = admin_user(request), 0, 0
        for outreach in queryset:
            try:
                if approve:
                    services.draft_approve(outreach=outreach, by=by)
                else:
                    services.draft_reject(outreach=outreach, by=by)
                done += 1
            except TransitionLost:
                skipped += 1
        verb = "approved" if approve else "rejected"
        self.message_user(request, f"{done} draft(s) {verb}; {skipped} already handled by someone else.")
