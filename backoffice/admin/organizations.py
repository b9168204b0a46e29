"""Admin of the orchestrator's concerns: organizations (their LLM caps are the budget's rules;
their settings need outreach.change_organization_settings), verified sender domains
(superusers only), and dead letters (operators read them; approvers replay, cancel or escalate them).

Both extend the tenancy gate of the records (backoffice.admin.outreach.OrganizationScopedAdmin): the
organization admin lives here rather than beside its model because its only rule beyond the
model's own is the budget's (`organization_limits`); registered once, here, the records' app
needs no import of the budget. Actions call services (orchestrator.failures.dead_letters).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from backoffice.admin.pauses import PauseActions
from backoffice.tenancy import (
    SETTINGS_PERMISSION,
    OrganizationScopedAdmin,
)
from orchestrator.budget import organization_limits
from outreach.models import Organization, Owner, VerifiedDomain


class OrganizationForm(forms.ModelForm):
    """An organization's LLM caps must let one outreach through (the budget's rule, said on the
    field), and its sender address must be on a domain verified for it (VerifiedDomain)."""

    # No Meta: the admin builds it from OrganizationAdmin.

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        rpm, tpm = data.get("llm_rpm"), data.get("llm_tpm")
        if rpm is not None or tpm is not None:
            try:
                organization_limits(rpm=rpm, tpm=tpm)
            except ValueError as exc:
                field = str(exc).split(" ", 1)[0]
                self.add_error(field if field in ("llm_rpm", "llm_tpm") else None, str(exc))
        self._check_sender(data.get("sender_email") or "")
        return data

    def _check_sender(self, sender: str) -> None:
        # Only a new or changed address: an address set before domains were verified keeps
        # working until someone edits it (then it must pass).
        if not sender or "sender_email" not in self.changed_data:
            return
        domain = sender.rpartition("@")[2].lower()
        verified = self.instance.pk and self.instance.verified_domains.filter(domain__iexact=domain).exists()
        if not verified:
            self.add_error(
                "sender_email",
                f"sender_email: {domain} is not a verified domain of this organization; "
                "a superuser verifies domains (Verified domains) before mail may be sent as them.",
            )


@admin.register(Organization)
class OrganizationAdmin(PauseActions, OrganizationScopedAdmin):
    organization_path = ""
    form = OrganizationForm
    list_display = (
        "name",
        "llm_rpm",
        "llm_tpm",
        "daily_spend_cap",
        "allowed_link_domains",
        "sender_email",
        "created_at",
    )
    search_fields = ("name",)
    # Members are the reviewers who may approve this organization's drafts.
    filter_horizontal = ("members",)
    # The budget's share, the daily LLM spend cap, what links drafts may carry, who mail claims
    # to be from, the legal text below every email, how long a draft may wait for approval and
    # how long a lead must be quiet before their messages are answered: changed only with
    # outreach.change_organization_settings (superusers have it), read-only otherwise.
    settings_fields = (
        "llm_rpm",
        "llm_tpm",
        "daily_spend_cap",
        "allowed_link_domains",
        "sender_email",
        "compliance_footer",
        "draft_expiry_days",
        "business_hours_start",
        "business_hours_end",
        "recipient_domain_daily_cap",
        "reply_quiet_s",
        # Reply triage (docs/email.md, "Reply triage"): what an autonomous owner answers alone.
        "reply_autonomous_classes",
        "reply_objection_close",
    )

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        readonly = tuple(super().get_readonly_fields(request, obj))
        return readonly if request.user.has_perm(SETTINGS_PERMISSION) else (*readonly, *self.settings_fields)

    def pause_scope(self, obj: Organization) -> tuple[Organization | None, Owner | None]:
        return obj, None

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A new tenant (and its uncapped share of the LLM budget) is the platform's decision.
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


@admin.register(VerifiedDomain)
class VerifiedDomainAdmin(OrganizationScopedAdmin):
    """Superusers only: a tenant verifying its own domains could claim another's."""

    list_display = ("domain", "organization", "created_at")
    list_filter = ("organization",)
    search_fields = ("domain",)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser
