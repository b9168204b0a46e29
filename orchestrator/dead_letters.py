"""The one dead-letter path: a terminal failure becomes DEAD plus a DeadLetter record that
says what failed, how often, and what an operator should do next."""

from __future__ import annotations

from django.db import transaction

from outreach.models import DeadLetter, ErrorClass, Outreach, OutreachEvent, State
from outreach.transitions import transition

SUGGESTED_ACTION = {
    ErrorClass.PERMANENT: "Fix the request or the provider account (key, model, payload), then replay.",
    ErrorClass.POLICY: "Read the draft and the lead's data; edit the lead or prompt, then replay or cancel.",
    ErrorClass.EXHAUSTED: "Check the provider/SMTP status; replay once it is healthy.",
    ErrorClass.STUCK: "A worker died on this job repeatedly; check worker logs before replaying.",
    ErrorClass.TRANSIENT: "Replay once the dependency is healthy.",
    ErrorClass.RATE_LIMITED: "Replay; the budget should prevent this (check other users of the key).",
}


def dead_letter(
    *, outreach: Outreach, from_: State, failure_class: ErrorClass, reason: str, job_type: str
) -> DeadLetter:
    """Move the outreach to DEAD and write its DeadLetter, in one transaction."""
    with transaction.atomic():
        transition(
            outreach_id=outreach.pk,
            from_=from_,
            to=State.DEAD,
            note=reason,
            error_class=failure_class,
            last_error=reason,
        )
        history = list(
            OutreachEvent.objects.filter(outreach=outreach)
            .exclude(error_class="")
            .values("at", "from_state", "to_state", "attempt", "error_class", "note")
        )
        return DeadLetter.objects.create(
            outreach=outreach,
            job_type=job_type,
            payload={
                "outreach_id": outreach.pk,
                "idempotency_key": outreach.idempotency_key,
                "kind": outreach.kind,
            },
            failure_class=failure_class,
            reason=reason,
            retry_history=[{**h, "at": h["at"].isoformat()} for h in history],
            suggested_action=SUGGESTED_ACTION.get(failure_class, "Inspect, then replay or cancel."),
            lead_id_ref=outreach.lead_id,
            owner_id_ref=outreach.owner_id,
            organization_id_ref=outreach.lead.organization_id,
            first_failed_at=history[0]["at"] if history else None,
        )
