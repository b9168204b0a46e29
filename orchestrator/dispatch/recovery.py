"""Stuck-work recovery: in-flight outreach whose worker vanished goes back where it can run.

Celery redelivers a message whose worker died (acks_late + reject_on_worker_lost), so this is
the backstop for what redelivery cannot cover: a message lost with Redis, a worker wedged past
its time limit, a dispatch whose enqueue never happened. Each recovered row costs an attempt,
so a job that kills its worker every time ends DEAD at the cap instead of looping.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from django.conf import settings

from config.logging import outreach_log_context
from orchestrator.dead_letters import dead_letter
from outreach.models import ErrorClass, Outreach, State
from outreach.transitions import TransitionLost, transition

log = logging.getLogger(__name__)

IN_FLIGHT = (State.DISPATCHED, State.GENERATING, State.SENDING)
BATCH = 500  # per cycle: recovery never makes a cycle O(queue depth)


def _target(row: Outreach) -> State:
    # A written draft is never regenerated (that would spend the LLM budget twice): it goes
    # back to the approved-send path. SENDING may or may not have reached SMTP: resending keeps
    # the same Message-ID, so the receiving side can drop a copy (at-least-once boundary).
    return State.APPROVED if row.draft_body else State.QUEUED


def recover_stuck(*, now: datetime, refund: Callable[[str], object]) -> int:
    """Move in-flight rows older than DISPATCH_STUCK_AFTER_S back; refund their reservations."""
    cutoff = now - timedelta(seconds=settings.DISPATCH_STUCK_AFTER_S)
    stuck = list(
        Outreach.objects.filter(state__in=IN_FLIGHT, state_changed_at__lt=cutoff)
        .order_by("state_changed_at")
        .select_related("lead")[:BATCH]
    )
    recovered = 0
    for row in stuck:
        try:
            _recover_one(row)
        except TransitionLost:
            continue  # the worker finished after all
        if row.reservation_id:
            refund(row.reservation_id)
        recovered += 1
    return recovered


def _recover_one(row: Outreach) -> None:
    attempts = row.attempts + 1
    note = f"stuck in {row.state} past {settings.DISPATCH_STUCK_AFTER_S}s: recovered"
    if attempts >= settings.RETRY_MAX_ATTEMPTS and row.state != State.SENDING:
        reason = f"{note}; attempt {attempts} reached the cap {settings.RETRY_MAX_ATTEMPTS}"
        dead_letter(
            outreach=row,
            from_=State(row.state),
            failure_class=ErrorClass.STUCK,
            reason=reason,
            job_type="generation",
        )
        return
    to = _target(row)
    transition(
        outreach_id=row.pk,
        from_=State(row.state),
        to=to,
        note=note,
        error_class=ErrorClass.STUCK,
        attempts=attempts,
        reservation_id="",
    )
    log.warning(
        "outreach recovered from stuck %s", row.state, extra={**outreach_log_context(row), "state": str(to)}
    )
