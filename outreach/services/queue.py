"""Queueing work: one outreach per idempotency key (outreach.idempotency)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from outreach.models import Lead, Outreach, State


def outreach_enqueue(
    *,
    lead: Lead,
    kind: Outreach.Kind,
    idempotency_key: str,
    not_before: datetime | None = None,
    step: int = 0,
    context: dict[str, Any] | None = None,
    in_reply_to: str = "",
    references: str = "",
) -> tuple[Outreach, bool]:
    """Queue one piece of work; re-enqueueing the same idempotency key returns the first one."""
    now = timezone.now()
    return Outreach.objects.get_or_create(
        idempotency_key=idempotency_key,
        defaults={
            "lead": lead,
            "owner_id": lead.owner_id,
            "kind": kind,
            "tier": Outreach.KIND_TIER[kind],
            "state": State.QUEUED,
            "not_before": not_before or now,
            "step": step,
            "context": context or {},
            "in_reply_to": in_reply_to,
            "references": references,
            "state_changed_at": now,
        },
    )
