"""The one dead-letter path: a terminal failure becomes DEAD plus a DeadLetter record that
says what failed, how often, and what an operator should do next; and the operator's ways
out of it: replay, cancel, escalate.

A dead letter is actionable while OPEN or ESCALATED (escalation hands it to someone, it does
not close it); REPLAYED and CANCELLED are final. Every resolution locks the DeadLetter row
first and then moves the outreach through `transition()`, in one transaction: two operators
(or the command and an admin) resolving the same letter end with one winner and one clear
`DeadLetterNotActionable`, never a double replay.

Replay success: a REPLAYED letter's `replay_succeeded` stays NULL while the replayed job
runs; the pipeline calls `replay_outcome_success()` when it reaches SENT or AWAITING_APPROVAL,
and `dead_letter()` marks it False when the outreach dies again.

The record is orchestrator.models.DeadLetter; operators reach these functions through
backoffice/admin/organizations.py and the replay_dead_letters command.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Q
from django.utils import timezone

from config.celery import app
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Outreach, OutreachEvent, State
from outreach.transitions import TransitionLost, back_to_queue, transition

SUGGESTED_ACTION = {
    ErrorClass.PERMANENT: "Fix the request or the provider account (key, model, payload), then replay.",
    ErrorClass.POLICY: "Read the draft and the lead's data; edit the lead or prompt, then replay or cancel.",
    ErrorClass.EXHAUSTED: "Check the provider/SMTP status; replay once it is healthy.",
    ErrorClass.STUCK: "A worker died on this job repeatedly; check worker logs before replaying.",
    ErrorClass.TRANSIENT: "Replay once the dependency is healthy.",
    ErrorClass.RATE_LIMITED: (
        "The provider kept refusing (429): check the key's quota and other users of the key, then replay."
    ),
    # Fits suggested_action (200 characters).
    ErrorClass.POSSIBLY_SENT: (
        "May be delivered already, maybe twice (same Message-ID). Confirm whether the prospect got it "
        "(mail log, CRM): if so cancel; if not replay (one more try)."
    ),
}

ACTIONABLE = (DeadLetter.Status.OPEN, DeadLetter.Status.ESCALATED)


class DeadLetterNotActionable(ValueError):
    """The dead letter was already resolved, or its outreach is no longer DEAD."""

    def __init__(self, message: str, *, dead_letter_id: int, status: str) -> None:
        super().__init__(message)
        self.dead_letter_id = dead_letter_id
        self.status = status


def attempts_exhausted(attempts: int) -> bool:
    """The one attempt cap: a failed try numbered RETRY_MAX_ATTEMPTS is the last; it ends as a
    dead letter (a failure's retry rule, or recovery of stuck work)."""
    return attempts >= settings.RETRY_MAX_ATTEMPTS


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
        # Dying again is the outcome of any replay of this outreach still waiting for one.
        _replays_finished(outreach_id=outreach.pk, succeeded=False)
        history = list(
            OutreachEvent.objects.filter(outreach=outreach)
            .exclude(error_class="")
            .values("at", "from_state", "to_state", "attempt", "error_class", "note")
        )
        letter = DeadLetter.objects.create(
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
        # Every path that dead-letters alerts operators, off the hot queues, once the record is
        # committed (the record itself never waits in a queue: it cannot be lost there).
        transaction.on_commit(lambda: app.send_task("dead_letter.alert", args=[letter.pk]))
        return letter


def replay_target(*, outreach: Outreach, failure_class: str) -> State:
    """Where a replay puts the work back (outreach.transitions.back_to_queue). A draft that
    failed the policy check is not sendable: it is written again, never sent."""
    return back_to_queue(outreach, sendable=failure_class != ErrorClass.POLICY)


def dead_letter_replay(*, dead_letter: DeadLetter, by_id: int | None = None) -> Outreach:
    """Put the outreach back to work with a fresh retry budget; the letter becomes REPLAYED.

    The idempotency key and Message-ID are left as they are, so a replayed send that already
    reached the recipient once is recognisably the same email (and SENT is recorded once).
    """
    with transaction.atomic():
        letter = _lock_actionable(dead_letter_id=dead_letter.pk, verb="replay")
        outreach = letter.outreach
        to = replay_target(outreach=outreach, failure_class=letter.failure_class)
        # A fresh retry and 429 allowance; send_attempts is kept: a resend of a possibly-sent
        # email that dies again comes straight back to a person.
        fields: dict[str, Any] = {
            "attempts": 0,
            "rate_limited": 0,
            "not_before": timezone.now(),
            "last_error": "",
            "blocked_reason": "",
        }
        if letter.failure_class == ErrorClass.POLICY:
            # Keep a policy-failed draft away from every path that treats a draft as sendable.
            fields |= {"draft_subject": "", "draft_body": ""}
        _move(letter=letter, to=to, by_id=by_id, note=f"replay of dead letter #{letter.pk}", **fields)
        # transition() only ever sets error_class; clearing it is a plain field write (not state).
        Outreach.objects.filter(pk=outreach.pk).update(error_class="")
        _close(letter=letter, status=DeadLetter.Status.REPLAYED, by_id=by_id)
    outreach.refresh_from_db()
    return outreach


def dead_letter_cancel(*, dead_letter: DeadLetter, by_id: int | None = None) -> DeadLetter:
    """Give up on the outreach (DEAD -> CANCELLED); the letter becomes CANCELLED.

    An outreach already CANCELLED elsewhere (an opt-out) only needs its letter closed.
    """
    with transaction.atomic():
        letter = _lock_actionable(dead_letter_id=dead_letter.pk, verb="cancel")
        if letter.outreach.state != State.CANCELLED:
            _move(
                letter=letter,
                to=State.CANCELLED,
                by_id=by_id,
                note=f"cancelled from dead letter #{letter.pk}",
            )
        return _close(letter=letter, status=DeadLetter.Status.CANCELLED, by_id=by_id)


def dead_letter_escalate(*, dead_letter: DeadLetter, by_id: int | None = None, note: str = "") -> DeadLetter:
    """Hand the letter to someone who can fix the cause; the outreach stays DEAD, replayable later."""
    with transaction.atomic():
        letter = _lock_actionable(
            dead_letter_id=dead_letter.pk, verb="escalate", allowed=(DeadLetter.Status.OPEN,)
        )
        who = f"user {by_id}" if by_id is not None else "system"
        # The reason is what an operator reads first, so the escalation note goes there.
        letter.reason += f"\n[escalated {timezone.now():%Y-%m-%d %H:%M} UTC by {who}] {note}".rstrip()
        letter.status = DeadLetter.Status.ESCALATED
        letter.save(update_fields=["reason", "status"])
        return letter


def replay_outcome_success(*, outreach_id: int) -> None:
    """The replayed outreach got through (SENT or AWAITING_APPROVAL): its replays succeeded."""
    _replays_finished(outreach_id=outreach_id, succeeded=True)


def replay_success_rate() -> float | None:
    """Succeeded / (succeeded + failed) over finished replays; None before any has finished."""
    counts = DeadLetter.objects.aggregate(
        ok=Count("id", filter=Q(replay_succeeded=True)), failed=Count("id", filter=Q(replay_succeeded=False))
    )
    finished = counts["ok"] + counts["failed"]
    return counts["ok"] / finished if finished else None


def _replays_finished(*, outreach_id: int, succeeded: bool) -> None:
    """Its REPLAYED letters still waiting for the replay's outcome get it. A plain statement:
    every finished job runs it (a replayed one is rare), and the ORM's compiling of the update
    cost more than running it."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {DeadLetter._meta.db_table} SET replay_succeeded = %s"
            " WHERE outreach_id = %s AND status = %s AND replay_succeeded IS NULL",
            [succeeded, outreach_id, DeadLetter.Status.REPLAYED.value],
        )


def _lock_actionable(
    *, dead_letter_id: int, verb: str, allowed: tuple[DeadLetter.Status, ...] = ACTIONABLE
) -> DeadLetter:
    # FOR UPDATE: a second resolver of the same letter waits here, then sees it resolved.
    letter = DeadLetter.objects.select_for_update().select_related("outreach").get(pk=dead_letter_id)
    if letter.status not in allowed:
        raise DeadLetterNotActionable(
            f"Cannot {verb} dead letter #{letter.pk}: it is {letter.status} "
            f"(only {' or '.join(allowed)} dead letters can be).",
            dead_letter_id=letter.pk,
            status=letter.status,
        )
    return letter


def _move(*, letter: DeadLetter, to: State, by_id: int | None, note: str, **fields: Any) -> None:
    try:
        transition(
            outreach_id=letter.outreach_id, from_=State.DEAD, to=to, note=note, actor_id=by_id, **fields
        )
    except TransitionLost:
        state = Outreach.objects.values_list("state", flat=True).get(pk=letter.outreach_id)
        raise DeadLetterNotActionable(
            f"Dead letter #{letter.pk}: outreach {letter.outreach_id} is {state}, not dead any more.",
            dead_letter_id=letter.pk,
            status=letter.status,
        ) from None


def _close(*, letter: DeadLetter, status: DeadLetter.Status, by_id: int | None) -> DeadLetter:
    letter.status, letter.resolved_at, letter.resolved_by_id = status, timezone.now(), by_id
    letter.save(update_fields=["status", "resolved_at", "resolved_by"])
    return letter
