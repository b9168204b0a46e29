"""Referral proposals (outreach.models.referrals): contacts a reply named, waiting for a person.

Operators of the organization read them here; those with `outreach.confirm_referralproposal`
confirm one (the contact becomes a lead of the referring lead's owner) or dismiss it. Nothing
is mailed to a proposed contact before that. Read-only otherwise.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from backoffice.actions import admin_user, run_and_report
from backoffice.tenancy import OrganizationScopedAdmin
from outreach.models import ReferralProposal
from outreach.services.referrals import referral_confirm, referral_dismiss

CONFIRM_PERMISSION = "outreach.confirm_referralproposal"
_ACTIONS = ("confirm_selected", "dismiss_selected")


@admin.register(ReferralProposal)
class ReferralProposalAdmin(OrganizationScopedAdmin):
    list_display = ("id", "created_at", "organization", "lead", "contact_email", "contact_name", "status")
    list_filter = ("status",)
    search_fields = ("contact_email", "contact_name", "lead__email")
    list_select_related = ("organization", "lead")
    actions = _ACTIONS
    ordering = ("-created_at", "-id")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [field.name for field in ReferralProposal._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # only a reply's triage proposes

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # decided by the actions, never edited

    def has_confirm_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(CONFIRM_PERMISSION)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        # A forged POST of a hidden action is refused outright, not silently ignored.
        forged = request.method == "POST" and request.POST.get("action") in _ACTIONS
        if forged and not self.has_confirm_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    @admin.action(description="Confirm: create the lead", permissions=["confirm"])
    def confirm_selected(self, request: HttpRequest, queryset: Any) -> None:
        by_id = admin_user(request).pk
        run_and_report(
            self,
            request,
            queryset,
            verb="confirmed (lead created)",
            service=lambda row: referral_confirm(proposal_id=row.pk, by_id=by_id),
        )

    @admin.action(description="Dismiss", permissions=["confirm"])
    def dismiss_selected(self, request: HttpRequest, queryset: Any) -> None:
        by_id = admin_user(request).pk
        run_and_report(
            self,
            request,
            queryset,
            verb="dismissed",
            service=lambda row: referral_dismiss(proposal_id=row.pk, by_id=by_id),
        )
