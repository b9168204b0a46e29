"""Stuck-work recovery: in-flight outreach whose worker vanished goes back where it can run.

Two ways to be stuck:
- a GENERATING row whose job lease (orchestrator.failures.leases) is gone: its worker process died
  (SIGKILL, OOM, a lost machine; a threads-pool worker strands hundreds of jobs at once). Back
  as soon as the row is older than the lease TTL, seconds rather than minutes. A live job's
  lease is renewed however slow its LLM call, so a slow job is never taken away this way.
- a DISPATCHED row a worker had received (its receipt mark is set) whose lease is gone: the
  worker died holding the message, prefetched or not yet begun (leases from receipt,
  orchestrator.failures.leases). Back within the lease TTL, no attempt charged: the job never
  ran, so it cannot be the job that kills its worker. Its message, if the broker ever hands it
  out again, finds the row moved and is dropped by the guarded first transition.
- any in-flight row older than DISPATCH_STUCK_AFTER_S: the backstop for what has no lease (a
  DISPATCHED message lost with Redis before any worker received it, SENDING) and for a job
  wedged while its process lives.
Each recovered row costs an attempt, so a job that kills its worker every time ends DEAD at
the cap instead of looping. A SENDING row may have reached the mail server: it is resent at
most once (same Message-ID), then it is a POSSIBLY_SENT dead letter (`send_unconfirmed`).
Taking a row back is a guarded transition: a job that turns out to be alive loses its own
final transition and sends nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Any

import redis
from django.conf import settings
from django.db import connection

from config.logging import outreach_log_context
from config.redis_client import Client
from orchestrator.failures.dead_letters import attempts_exhausted, dead_letter
from orchestrator.failures.leases import lease_client, leases_alive, receipts_clear, receipts_lost
from outreach.models import ErrorClass, Outreach, State
from outreach.transitions import IN_FLIGHT, TransitionLost, back_to_queue, transition

log = logging.getLogger(__name__)

BATCH = 500  # per cycle: recovery never makes a cycle O(queue depth)


# "Resent at most once": the first try and one resend may reach the prospect; a third try of
# an email whose fate is unknown never goes out without a person confirming.
UNCONFIRMED_SENDS_MAX = 2


def send_unconfirmed(*, outreach: Outreach, why: str, error_class: ErrorClass, **fields: Any) -> State:
    """A SENDING row whose outcome is unknown (its worker died; no answer after DATA; SENT could
    not be recorded): the server may have the email. Back to APPROVED for a resend with the same
    Message-ID while `send_attempts` is under UNCONFIRMED_SENDS_MAX, else a POSSIBLY_SENT dead
    letter for a person. Returns the state it ended in; raises TransitionLost like transition().
    """
    # Fresh from the database: the caller's row predates the claim that counted this try.
    sends = Outreach.objects.values_list("send_attempts", flat=True).get(pk=outreach.pk)
    if sends >= UNCONFIRMED_SENDS_MAX:
        reason = (
            f"{why}: the email may have been sent {sends} times (Message-ID {outreach.message_id}); "
            "not sent again without a person"
        )
        dead_letter(
            outreach=outreach,
            from_=State.SENDING,
            failure_class=ErrorClass.POSSIBLY_SENT,
            reason=reason,
            job_type="send",
        )
        return State.DEAD
    transition(
        outreach_id=outreach.pk,
        from_=State.SENDING,
        to=State.APPROVED,
        note=f"{why}: resending once with the same Message-ID",
        error_class=error_class,
        **fields,
    )
    return State.APPROVED


# What a recovery query reads of a row: enough to decide, and to see later that it has not moved.
Seen = tuple[int, str, datetime]  # id, state, state_changed_at


def recover_stuck(*, now: datetime, refund: Callable[[str], object], leases: Client | None = None) -> int:
    """Move stuck in-flight rows back (see the module docstring); refund their reservations.
    `leases`: the Redis holding the job leases (default: REDIS_URL).

    The queries read each candidate's id, state and time of its last move, not the row: under
    a backlog many in-flight rows are older than the lease TTL (DISPATCHED rows waiting in the
    broker, GENERATING ones on a slow model) and nearly all of them are alive. Only the rows
    recovered are loaded whole, and only if they have not moved since they were read."""
    cutoff = now - timedelta(seconds=settings.DISPATCH_STUCK_AFTER_S)
    timed_out, generating, dispatched = _candidates(
        cutoff=cutoff, younger_than_ttl=now - timedelta(seconds=settings.GENERATION_LEASE_TTL_S)
    )
    stuck = [(seen, f"stuck in {seen[1]} past {settings.DISPATCH_STUCK_AFTER_S}s") for seen in timed_out]
    if len(stuck) < BATCH:
        orphans = _worker_gone(
            State.GENERATING, generating[: BATCH - len(stuck)], gone=_unleased, client=leases
        )
        stuck += [(seen, "GENERATING with no live worker (job lease gone)") for seen in orphans]
    moves: list[tuple[Seen, Callable[[Outreach], object]]] = [
        (seen, partial(_recover_one, why=why)) for seen, why in stuck
    ]
    if len(stuck) < BATCH:
        unstarted = _worker_gone(
            State.DISPATCHED, dispatched[: BATCH - len(stuck)], gone=receipts_lost, client=leases
        )
        moves += [(seen, _requeue_unstarted) for seen in unstarted]
    rows = _unmoved([seen for seen, _ in moves])
    recovered = 0
    for seen, move in moves:
        row = rows.get(seen[0])
        if row is None:
            continue  # it moved on since it was seen: its worker finished, or another took its message
        try:
            move(row)
        except TransitionLost:
            continue  # the same, meanwhile
        if row.reservation_id:
            refund(row.reservation_id)
        recovered += 1
    if moves:
        _receipts_forget([seen[0] for seen, _ in moves], client=leases)
    return recovered


# The candidates, each read its own oldest BATCH (oldest move first; index
# outreach_in_flight_age): in-flight rows past the timeout; GENERATING, then DISPATCHED rows
# older than the lease TTL (younger ones may not have taken theirs yet) and younger than the
# timeout, whose workers may be gone. One statement a cycle, written once: as three ORM
# queries they cost ~3 ms a cycle, two thirds of it building them (bench/dispatch.py,
# 2026-12-07). Subqueries, not parenthesized arms, so SQLite (the demo) reads it too.
_CANDIDATES = " UNION ALL ".join(
    f"SELECT * FROM (SELECT {arm} AS arm, id, state, state_changed_at FROM {Outreach._meta.db_table} "
    f"WHERE {where} ORDER BY state_changed_at LIMIT {BATCH:d}) AS arm{arm}"
    for arm, where in enumerate(
        (
            f"state IN ({', '.join(['%s'] * len(IN_FLIGHT))}) AND state_changed_at < %s",
            "state = %s AND state_changed_at < %s AND state_changed_at >= %s",
            "state = %s AND state_changed_at < %s AND state_changed_at >= %s",
        )
    )
)


def _candidates(*, cutoff: datetime, younger_than_ttl: datetime) -> tuple[list[Seen], list[Seen], list[Seen]]:
    """The rows timed out (in flight since before `cutoff`), and the GENERATING and the
    DISPATCHED ones in flight since between `cutoff` and `younger_than_ttl`, each oldest
    move first (`_CANDIDATES`)."""
    # The times as the field writes them (on SQLite, naive UTC text, as stored), and the rows
    # read as the model: its fields come back as the ORM converts them (a datetime from SQLite too).
    field = Outreach._meta.get_field("state_changed_at")
    cutoff, younger_than_ttl = (field.get_db_prep_value(t, connection) for t in (cutoff, younger_than_ttl))
    params = [
        *(str(state) for state in IN_FLIGHT),
        cutoff,
        *(str(State.GENERATING), younger_than_ttl, cutoff),
        *(str(State.DISPATCHED), younger_than_ttl, cutoff),
    ]
    arms: tuple[list[Seen], list[Seen], list[Seen]] = ([], [], [])
    for row in Outreach.objects.raw(_CANDIDATES, params):
        arms[row.arm].append((row.pk, row.state, row.state_changed_at))  # type: ignore[attr-defined]  # the query's own column
    for seen in arms:
        seen.sort(key=lambda s: s[2])  # UNION ALL keeps no order across arms, nor promises one within
    return arms


def _unmoved(seen: list[Seen]) -> dict[int, Outreach]:
    """The rows `seen`, whole (with their lead, for the logs and dead letters), that are still
    in the state and at the move they were seen at: a row moved since is no longer stuck."""
    if not seen:
        return {}
    rows = Outreach.objects.select_related("lead").in_bulk([pk for pk, _, _ in seen])
    return {
        pk: rows[pk]
        for pk, state, changed in seen
        if pk in rows and (rows[pk].state, rows[pk].state_changed_at) == (state, changed)
    }


def _worker_gone(
    state: State, seen: list[Seen], *, gone: Callable[..., set[int]], client: Client | None
) -> list[Seen]:
    """Those of the `state` rows `seen` (older than the lease TTL, younger than the timeout:
    `_candidates`) whose worker `gone` says is gone (`client`, `outreach_ids` -> those among
    them): GENERATING without a job lease, DISPATCHED received and no longer leased. Redis
    unreachable: none (the timeout still covers them)."""
    if not seen:
        return []
    try:
        lost = gone(client=client or lease_client(), outreach_ids=[pk for pk, _, _ in seen])
    except redis.RedisError as exc:
        log.warning("leases unreadable, recovery of %s rows skipped this cycle: %s", state, exc)
        return []
    return [s for s in seen if s[0] in lost]


def _unleased(*, client: Client, outreach_ids: list[int]) -> set[int]:
    """The outreach among `outreach_ids` whose job lease is gone. Raises RedisError."""
    return set(outreach_ids) - leases_alive(client=client, outreach_ids=outreach_ids)


def _requeue_unstarted(row: Outreach) -> None:
    """Back where it waits (QUEUED, or APPROVED for a send), no attempt charged."""
    to = back_to_queue(row)
    transition(
        outreach_id=row.pk,
        from_=State.DISPATCHED,
        to=to,
        note="received by a worker that is gone (job lease gone) before it began: recovered",
        error_class=ErrorClass.STUCK,
        reservation_id="",
    )
    log.warning(
        "outreach recovered from a lost worker's prefetch",
        extra={**outreach_log_context(row), "state": str(to)},
    )


def _receipts_forget(outreach_ids: list[int], *, client: Client | None) -> None:
    """The recovered rows' receipt marks go: their next dispatch is not received yet."""
    try:
        receipts_clear(client=client or lease_client(), outreach_ids=outreach_ids)
    except redis.RedisError as exc:  # each mark expires by itself (DISPATCH_STUCK_AFTER_S)
        log.warning("receipt marks not cleared: %s", exc)


def _recover_one(row: Outreach, *, why: str) -> None:
    attempts = row.attempts + 1
    note = f"{why}: recovered"
    if row.state == State.SENDING:
        send_unconfirmed(
            outreach=row, why=note, error_class=ErrorClass.STUCK, attempts=attempts, reservation_id=""
        )
        return
    if attempts_exhausted(attempts):
        reason = f"{note}; attempt {attempts} reached the cap {settings.RETRY_MAX_ATTEMPTS}"
        dead_letter(
            outreach=row,
            from_=State(row.state),
            failure_class=ErrorClass.STUCK,
            reason=reason,
            job_type="generation",
        )
        return
    to = back_to_queue(row)
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
