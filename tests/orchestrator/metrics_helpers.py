"""Builders for metrics tests: rows with back-dated times (auto_now_add fields are rewritten).

Events must be created oldest first: window queries find their start on the primary key,
which in production grows with `at` (see orchestrator.metrics.sql.first_id_since).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Outreach, OutreachEvent, State
from tests.factories import make_outreach


def outreach_at(*, created_at: datetime, **fields: Any) -> Outreach:
    """An outreach created at `created_at` (and due then, unless `not_before` says otherwise)."""
    outreach = make_outreach(**{"not_before": created_at, **fields})
    Outreach.objects.filter(pk=outreach.pk).update(created_at=created_at)
    outreach.refresh_from_db()
    return outreach


def event(
    outreach: Outreach, from_: State, to: State, *, at: datetime, error_class: ErrorClass | str = ""
) -> OutreachEvent:
    row = OutreachEvent.objects.create(
        outreach=outreach, from_state=from_, to_state=to, error_class=error_class
    )
    OutreachEvent.objects.filter(pk=row.pk).update(at=at)
    row.refresh_from_db()
    return row


def dead_letter_row(
    outreach: Outreach, *, failure_class: ErrorClass, reason: str, **fields: Any
) -> DeadLetter:
    return DeadLetter.objects.create(
        outreach=outreach,
        job_type="generation",
        payload={"outreach_id": outreach.pk},
        failure_class=failure_class,
        reason=reason,
        suggested_action="replay",
        lead_id_ref=outreach.lead_id,
        owner_id_ref=outreach.owner_id,
        organization_id_ref=outreach.lead.organization_id,
        **fields,
    )
