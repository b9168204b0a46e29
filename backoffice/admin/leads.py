"""Admin for the work on leads: leads themselves (with "Mark converted", which stops their
sequence, "Reactivate" with a reason, and a CSV export), and intake's assignment batches (with
"Upload leads CSV": backoffice/admin/uploads.py) and their per-lead children, read-only.

An opted-out, bounced or complained lead's status is read-only in its form, for everyone: the
only way back to active is the Reactivate action, which needs outreach.reactivate_lead and a
reason, is written in the lead's status history, and refuses a lead that complained."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from backoffice.actions import ask_then_run
from backoffice.admin.uploads import LeadUploadAdmin
from backoffice.csv_export import CsvExportAdmin
from backoffice.tenancy import OrganizationScopedAdmin
from nurture.sequence import lead_mark_converted, lead_reactivate
from outreach.models import SUPPRESSED, AssignmentBatch, AssignmentItem, Lead, LeadEvent

REACTIVATE_PERMISSION = "outreach.reactivate_lead"


class LeadForm(forms.ModelForm):
    # No Meta: the admin builds it from LeadAdmin.

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        organization, owner = data.get("organization"), data.get("owner")
        if organization is not None and owner is not None and owner.organization_id != organization.pk:
            self.add_error(
                "owner", f"{owner.name} works for {owner.organization}: pick an owner of {organization}."
            )
        return data


class ReactivateForm(forms.Form):
    reason = forms.CharField(
        max_length=500,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Why this person may be emailed again (e.g. they asked to be, in writing). "
        "Kept in each lead's status history with your name.",
        error_messages={"required": "Give the reason: a reactivation is kept with who did it and why."},
    )


class LeadEventInline(admin.TabularInline):
    """The lead's opt-outs and reactivations: who, when, why."""

    model = LeadEvent
    extra = 0
    can_delete = False
    fields = ("at", "from_status", "to_status", "note", "actor")
    readonly_fields = fields
    verbose_name_plural = "status history"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Part of the lead: whoever may read the lead reads why its status changed.
        return request.user.has_perm("outreach.view_lead") or request.user.has_perm("outreach.change_lead")


@admin.register(Lead)
class LeadAdmin(CsvExportAdmin, OrganizationScopedAdmin):
    form = LeadForm
    export_fields = (
        "id",
        "email",
        "first_name",
        "last_name",
        "company",
        "title",
        "timezone",
        "status",
        "owner__name",
        "organization__name",
        "created_at",
    )
    list_display = ("email", "first_name", "last_name", "company", "owner", "status", "timezone")
    list_filter = ("status", "owner__organization", "owner")
    search_fields = ("email", "first_name", "last_name", "company")
    list_select_related = ("owner",)
    raw_id_fields = ("owner",)
    actions = ("mark_converted", "reactivate_selected")
    inlines = [LeadEventInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Lead | None = None) -> Any:
        readonly = tuple(super().get_readonly_fields(request, obj))
        # Out of opted-out, bounced or complained only through reactivate_selected (a reason,
        # a permission of its own, never a complaint): a POST naming another status is ignored.
        return (*readonly, "status") if obj is not None and obj.status in SUPPRESSED else readonly

    def get_inline_instances(self, request: HttpRequest, obj: Lead | None = None) -> Any:
        return super().get_inline_instances(request, obj) if obj is not None else []  # a new lead: no history

    def has_reactivate_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(REACTIVATE_PERMISSION)

    # "change": marking converted changes the lead and cancels its pending emails; without the
    # declaration Django offers (and runs) it for anyone who may merely view the list.
    @admin.action(description="Mark converted (stops their sequence)", permissions=["change"])
    def mark_converted(self, request: HttpRequest, queryset: QuerySet[Lead]) -> None:
        cancelled = sum(len(lead_mark_converted(lead=lead)) for lead in queryset)
        self.message_user(
            request, f"{queryset.count()} lead(s) marked converted; {cancelled} pending email(s) cancelled."
        )

    @admin.action(description="Reactivate selected leads (with a reason)", permissions=["reactivate"])
    def reactivate_selected(self, request: HttpRequest, queryset: QuerySet[Lead]) -> TemplateResponse | None:
        if not queryset.filter(status__in=SUPPRESSED).exclude(status=Lead.Status.COMPLAINED).exists():
            self.message_user(
                request,
                "Nothing selected can be reactivated: only opted-out or bounced leads can, never a "
                "lead that complained.",
                messages.ERROR,
            )
            return None
        return ask_then_run(
            self,
            request,
            queryset,
            form_class=ReactivateForm,
            page=(
                "Reactivate leads",
                "Set the selected opted-out or bounced leads back to active. Their cancelled emails "
                "stay cancelled. A lead that complained is never reactivated.",
                "Reactivate",
            ),
            verb="reactivated",
            service=lambda lead, by, answer: lead_reactivate(lead=lead, by=by, reason=answer["reason"]),
        )


class ReadOnlyAdmin(OrganizationScopedAdmin):
    """Written only by assign_leads and its workers; admin shows progress (of the user's
    organizations, like every admin), nobody edits it."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(AssignmentBatch)
class AssignmentBatchAdmin(LeadUploadAdmin, ReadOnlyAdmin):
    change_form_template = "admin/nurture/assignmentbatch_change_form.html"
    # The batch's page is its progress report (the upload redirects here).
    fields = (
        "organization",
        "file_name",
        "status",
        "progress",
        "leads_created",
        "leads_existing",
        "outreach_created",
        "created_at",
        "completed_at",
        "children_link",
    )
    readonly_fields = fields
    list_display = ("id", *fields)
    list_filter = ("status", "organization")
    search_fields = ("file_name",)
    list_select_related = ("organization",)
    ordering = ("-id",)

    @admin.display(description="progress")
    def progress(self, batch: AssignmentBatch) -> str:
        percent = 100 * batch.children_done // batch.children_total if batch.children_total else 100
        return f"{batch.children_done}/{batch.children_total} leads ({percent}%)"

    @admin.display(description="children")
    def children_link(self, batch: AssignmentBatch) -> str:
        url = reverse("admin:outreach_assignmentitem_changelist") + f"?batch={batch.pk}"
        return format_html('<a href="{}">per-lead rows</a>', url)


@admin.register(AssignmentItem)
class AssignmentItemAdmin(ReadOnlyAdmin):
    organization_path = "batch__organization"
    list_display = ("batch", "line", "email", "owner", "status", "outcome", "lead", "done_at")
    list_filter = ("status", "outcome")
    search_fields = ("email",)
    list_select_related = ("batch", "owner")
    raw_id_fields = ("batch", "owner", "lead")
    show_full_result_count = False  # a batch of 100,000 children: skip the unfiltered COUNT(*)
    ordering = ("-batch_id", "line")
