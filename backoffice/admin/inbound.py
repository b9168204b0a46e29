"""Unverified inbound: email that claims to be a lead's reply but was not believed
(nurture.intake.belief; docs/email.md, "Unverified inbound"). The organization's operators read
it here; those with `outreach.accept_unverifiedinbound` may accept it as the lead's reply
(nurture.intake.replies.unverified_accept, which runs the normal reply intake). Read-only
otherwise. A row whose organization could not be told shows to superusers only (the tenancy
gate lists a member only their organizations' rows).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from backoffice.actions import admin_user, run_and_report
from backoffice.tenancy import OrganizationScopedAdmin
from nurture.intake.replies import unverified_accept
from outreach.models import UnverifiedInbound

ACCEPT_PERMISSION = "outreach.accept_unverifiedinbound"


@admin.register(UnverifiedInbound)
class UnverifiedInboundAdmin(OrganizationScopedAdmin):
    list_display = ("id", "received_at", "organization", "lead", "sender", "subject", "reason", "status")
    list_filter = ("status", "reason", "provider")
    search_fields = ("sender", "subject", "message_id")
    list_select_related = ("organization", "lead")
    fieldsets = (
        (None, {"fields": ("status", "reason", "detail", "organization", "lead")}),
        ("Message", {"fields": ("sender", "recipients", "subject", "body_text", "received_at", "provider")}),
        ("Thread and verdicts", {"fields": ("message_id", "in_reply_to", "references", "verdicts")}),
        ("Accepted", {"fields": ("accepted_by", "accepted_at", "outreach")}),
    )
    actions = ("accept_selected",)
    ordering = ("-received_at", "-id")

    def get_queryset(self, request: HttpRequest) -> QuerySet[UnverifiedInbound]:
        return super().get_queryset(request).defer("body", "verdicts")  # the list shows neither

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [field.name for field in UnverifiedInbound._meta.fields] + ["body_text"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # only the inbound webhooks write these

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # what arrived is evidence: read, accepted, never edited

    def has_accept_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(ACCEPT_PERMISSION)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        # A forged POST of the hidden action is refused outright, not silently ignored.
        forged = request.method == "POST" and request.POST.get("action") == "accept_selected"
        if forged and not self.has_accept_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    @admin.display(description="Text (never attachments)")
    def body_text(self, obj: UnverifiedInbound) -> str:
        return format_html('<pre style="white-space: pre-wrap">{}</pre>', obj.body)

    @admin.action(description="Accept as the lead's reply", permissions=["accept"])
    def accept_selected(self, request: HttpRequest, queryset: QuerySet[UnverifiedInbound]) -> None:
        by_id = admin_user(request).pk
        run_and_report(
            self,
            request,
            queryset,
            verb="accepted as the lead's reply",
            service=lambda held: unverified_accept(unverified_id=held.pk, by_id=by_id),
        )
