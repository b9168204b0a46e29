"""The approval queue: reviewers read, edit, approve or reject drafts awaiting approval."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce, Left
from django.http import HttpRequest
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.html import format_html

from backoffice.actions import ReclassifyAction, admin_user, reject_with_reason
from backoffice.tenancy import APPROVE_PERMISSION, OrganizationScopedAdmin
from nurture import review
from nurture.intake.thread import EXCERPT_CHARS, excerpt, lead_thread
from nurture.mail.compliance import footer_block
from nurture.writing.draft_policy import check_draft
from outreach.models import DraftForApproval, Outreach, State
from outreach.transitions import TransitionLost


class DraftForm(forms.ModelForm):
    """The reviewer's edit: an approved email passes nurture.writing.draft_policy.check_draft (a reject needs nothing)."""

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
class ApprovalQueueAdmin(ReclassifyAction, OrganizationScopedAdmin):
    """Only users holding outreach.approve_outreach see this; everyone else gets 403. And only
    drafts of owners in their organizations (OrganizationScopedAdmin)."""

    organization_path = "owner__organization"
    form = DraftForm

    list_display = (
        "subject_line",
        "prospect_wrote",
        "preview",
        "triage",
        "lead_who",
        "company",
        "owner",
        "kind",
        "waiting_for",
    )
    list_filter = ("owner", "kind", "reply_class")
    search_fields = ("lead__email", "draft_subject", "lead__company")
    list_select_related = ("owner", "lead")
    ordering = ("state_changed_at", "id")
    fields = (
        "lead_context",
        "owner",
        "kind",
        "triage",
        "conversation",
        "draft_subject",
        "draft_body",
        "footer_at_send",
    )
    readonly_fields = ("lead_context", "owner", "kind", "triage", "conversation", "footer_at_send")
    actions = ("approve_selected", "reject_selected", "reclassify_selected")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Outreach]:
        # The list's excerpt reads the prospect's latest message (the last one joined, else the
        # first), its head only: a context can hold a 30 MB body, and a page lists 100 rows.
        latest = Coalesce(KT("context__joined__-1__body"), KT("context__inbound__body"))
        return (
            super()
            .get_queryset(request)
            .filter(state=State.AWAITING_APPROVAL)
            .annotate(latest_inbound=Left(latest, EXCERPT_CHARS * 40))
        )

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

    @admin.display(description="Prospect wrote")
    def prospect_wrote(self, obj: Outreach) -> str:
        # A reply's: what it answers, in a word. Intros and nudges answer nothing.
        if obj.kind != Outreach.Kind.REPLY:
            return ""
        text = excerpt(getattr(obj, "latest_inbound", None) or "") or "(no text)"
        return format_html('<span style="display:inline-block;min-width:12em;max-width:22em">{}</span>', text)

    @admin.display(description="Class", ordering="reply_class")
    def triage(self, obj: Outreach) -> str:
        # The triage's class and why (nurture.intake.triage); the reason may quote the email.
        if not obj.reply_class:
            return "" if obj.kind != Outreach.Kind.REPLY else "(not triaged)"
        return format_html(
            "{}<br><small>{}</small>", obj.get_reply_class_display(), obj.reply_class_reason or "(no reason)"
        )

    @admin.display(description="Conversation")
    def conversation(self, obj: Outreach) -> str:
        # Our emails as sent and the prospect's messages, oldest first, quotes folded; the
        # template escapes every text (inbound email is hostile: its HTML shows as text).
        return render_to_string(
            "admin/outreach/draftforapproval/thread.html",
            {"thread": lead_thread(outreach=obj), "this": obj.pk},
        )

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
                review.draft_reject(outreach=stored, by=admin_user(request))
            else:
                review.draft_approve(
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
                review.draft_approve(outreach=outreach, by=by)
                done += 1
            except TransitionLost:
                skipped += 1
        self.message_user(request, f"{done} draft(s) approved; {skipped} already handled by someone else.")

    @admin.action(description="Reject selected drafts with a reason", permissions=["reject"])
    def reject_selected(self, request: HttpRequest, queryset: QuerySet[Outreach]) -> Any:
        return reject_with_reason(self, request, queryset)

    def has_reject_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("outreach.reject_outreach")
