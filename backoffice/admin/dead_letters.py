"""Dead letters: operators read them; approvers replay, cancel or escalate them
(orchestrator.failures.dead_letters)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html

from backoffice.actions import admin_user
from backoffice.csv_export import CsvExportAdmin
from backoffice.tenancy import (
    APPROVE_PERMISSION,
    OrganizationScopedAdmin,
)
from orchestrator.failures.dead_letters import (
    DeadLetterNotActionable,
    dead_letter_cancel,
    dead_letter_escalate,
    dead_letter_replay,
)
from orchestrator.models import DeadLetter


@admin.register(DeadLetter)
class DeadLetterAdmin(CsvExportAdmin, OrganizationScopedAdmin):
    """Operators read failures here; approvers (or superusers) replay, cancel or escalate them,
    each only their organizations' (the outreach's owner's organization)."""

    organization_path = "outreach__owner__organization"
    export_fields = (
        "id",
        "outreach_id",
        "job_type",
        "failure_class",
        "status",
        "reason",
        "suggested_action",
        "organization_id_ref",
        "owner_id_ref",
        "lead_id_ref",
        "first_failed_at",
        "created_at",
        "resolved_at",
    )

    list_display = (
        "id",
        "outreach",
        "job_type",
        "failure_class",
        "status",
        "suggested_action",
        "entity_ids",
        "replay_succeeded",
        "created_at",
    )
    list_filter = ("status", "failure_class", "job_type", "replay_succeeded")
    search_fields = ("reason",)
    list_select_related = ("outreach",)
    fieldsets = (
        (None, {"fields": ("outreach", "status", "failure_class", "job_type", "reason", "suggested_action")}),
        ("Entities", {"fields": ("lead_id_ref", "owner_id_ref", "organization_id_ref")}),
        ("Job", {"fields": ("payload_pretty", "retry_history_pretty")}),
        (
            "Timeline",
            {"fields": ("first_failed_at", "created_at", "resolved_at", "resolved_by", "replay_succeeded")},
        ),
    )
    readonly_fields = [f.name for f in DeadLetter._meta.fields] + ["payload_pretty", "retry_history_pretty"]
    actions = ("replay_selected", "cancel_selected", "escalate_selected")
    resolve_actions = frozenset(actions)

    def get_queryset(self, request: HttpRequest) -> QuerySet[DeadLetter]:
        # The JSON and the outreach's draft can be large; the list shows neither.
        heavy = (
            "payload",
            "retry_history",
            "outreach__draft_body",
            "outreach__context",
            "outreach__last_error",
        )
        return super().get_queryset(request).select_related("outreach").defer(*heavy)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_approve_permission(self, request: HttpRequest) -> bool:
        # has_perm is True for every active superuser too.
        return request.user.has_perm(APPROVE_PERMISSION)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) or self.has_approve_permission(request)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) or self.has_approve_permission(request)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        # Unpermitted actions are hidden; a forged POST naming one is refused outright, not ignored.
        forged = request.method == "POST" and request.POST.get("action") in self.resolve_actions
        if forged and not self.has_approve_permission(request):
            raise PermissionDenied
        return super().changelist_view(request, extra_context)

    @admin.display(description="Entity ids")
    def entity_ids(self, obj: DeadLetter) -> str:
        return f"org {obj.organization_id_ref} / owner {obj.owner_id_ref} / lead {obj.lead_id_ref}"

    @admin.display(description="Payload")
    def payload_pretty(self, obj: DeadLetter) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.payload, indent=2, sort_keys=True))

    @admin.display(description="Retry history")
    def retry_history_pretty(self, obj: DeadLetter) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.retry_history, indent=2))

    @admin.action(description="Replay selected dead letters", permissions=["approve"])
    def replay_selected(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        self._resolve(
            request, queryset, "replayed", lambda dl, by: dead_letter_replay(dead_letter=dl, by_id=by)
        )

    @admin.action(description="Cancel selected dead letters", permissions=["approve"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        self._resolve(
            request, queryset, "cancelled", lambda dl, by: dead_letter_cancel(dead_letter=dl, by_id=by)
        )

    @admin.action(description="Escalate selected dead letters", permissions=["approve"])
    def escalate_selected(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        note = f"from the admin by {request.user}"
        self._resolve(
            request,
            queryset,
            "escalated",
            lambda dl, by: dead_letter_escalate(dead_letter=dl, by_id=by, note=note),
        )

    def _resolve(
        self,
        request: HttpRequest,
        queryset: QuerySet[DeadLetter],
        verb: str,
        service: Callable[[DeadLetter, int], object],
    ) -> None:
        done, skipped = 0, []
        for letter in queryset.order_by("id"):
            try:
                service(letter, admin_user(request).pk)
                done += 1
            except DeadLetterNotActionable as exc:
                skipped.append(str(exc))
        level = messages.WARNING if skipped else messages.SUCCESS
        detail = f": {' '.join(skipped)}" if skipped else "."
        self.message_user(request, f"{done} dead letter(s) {verb}; {len(skipped)} skipped{detail}", level)
