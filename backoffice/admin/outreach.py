"""Outreach: every row with its history, read-only (the state machine owns it), with the
operators' actions (backoffice/actions.py) and CSV export.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from backoffice.actions import OutreachActions
from backoffice.csv_export import CsvExportAdmin
from backoffice.tenancy import OrganizationScopedAdmin
from outreach.models import Outreach, OutreachEvent, State


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
        "reply_class",
    )
    list_filter = ("state", "tier", "kind", "owner", "error_class", "reply_class")
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
