"""The mailboxes an organization's email leaves from (docs/email.md, "Mailboxes"): its operators
add and change them, see each one's day against its cap and warm-up step, next allowed send,
bounce and complaint rates, and resume one that was paused. Scoped to the user's
organizations (OrganizationScopedAdmin); owners offered only from them, and a mailbox serves
owners of its own organization only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from backoffice.dashboard import percent
from backoffice.tenancy import OrganizationScopedAdmin
from orchestrator.budget import get_budget
from orchestrator.controls.mailboxes import MailboxStatus, mailbox_status
from outreach.models import Mailbox
from outreach.services.mailboxes import mailbox_resume


class MailboxForm(forms.ModelForm):
    class Meta:
        model = Mailbox
        fields = (
            "organization",
            "address",
            "owners",
            "daily_cap",
            "ramp_from",
            "ramp_start",
            "ramp_step",
            "min_spacing_s",
            "max_spacing_s",
            "active",
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        organization = data.get("organization")
        strangers = [
            o.name for o in data.get("owners") or [] if organization and o.organization_id != organization.pk
        ]
        if strangers:
            self.add_error("owners", f"owners: {', '.join(strangers)} not of {organization}.")
        return data


@admin.register(Mailbox)
class MailboxAdmin(OrganizationScopedAdmin):
    form = MailboxForm
    list_display = (
        "address",
        "organization",
        "served",
        "sent_today",
        "next_send",
        "bounce_rate",
        "complaint_rate",
        "active",
        "paused_reason",
    )
    list_filter = ("active", "organization")
    list_select_related = ("organization",)
    search_fields = ("address",)
    ordering = ("address",)
    filter_horizontal = ("owners",)
    readonly_fields = ("paused_reason", "resumed_at")
    actions = ("resume_selected",)

    def _status(self, obj: Mailbox) -> MailboxStatus:
        found = getattr(obj, "_status", None)
        if found is None:
            found = obj._status = mailbox_status(budget=get_budget(), mailbox_ids=[obj.pk])[0]  # type: ignore[attr-defined]
        return found

    @admin.display(description="owners")
    def served(self, obj: Mailbox) -> str:
        return self._status(obj).owners

    @admin.display(description="sent today / cap (warm-up step)")
    def sent_today(self, obj: Mailbox) -> str:
        status = self._status(obj)
        return f"{status.sent_today} / {status.cap} ({status.ramp_cap})"

    @admin.display(description="next send")
    def next_send(self, obj: Mailbox) -> str:
        at = self._status(obj).next_send_at
        return "now" if at is None else f"{at:%H:%M:%S} UTC"

    @admin.display(description="bounces")
    def bounce_rate(self, obj: Mailbox) -> str:
        return percent(self._status(obj).bounce_rate)

    @admin.display(description="complaints")
    def complaint_rate(self, obj: Mailbox) -> str:
        return percent(self._status(obj).complaint_rate)

    @admin.action(description="Resume selected mailboxes", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Mailbox]) -> None:
        done = mailbox_resume(mailbox_ids=list(queryset.values_list("pk", flat=True)))
        self.message_user(request, f"{done} mailbox(es) resumed.", messages.SUCCESS)
