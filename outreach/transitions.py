"""The Outreach state machine: the one place that writes `Outreach.state`.

Every move is one conditional UPDATE with the from-state in the WHERE clause. A row count of 0
means someone else moved the row first (a duplicate delivery, a racing worker, a recovery
sweep): the caller gets `TransitionLost` and must not act as if it owned the work. This is
what makes at-least-once task delivery safe: only the winner of a move does its side effect.

The states and their diagram: docs/architecture.md, "States". `ALLOWED` below is the table of
allowed moves, each row with its reason.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Q
from django.db.models.sql import UpdateQuery
from django.utils import timezone

from outreach.counters import Move, counters_add, move_increments, moves_increments, reply_decided
from outreach.models import (
    ErrorClass,
    Outreach,
    OutreachEvent,
    Owner,
    State,
    int_array,
    owner_daily_sends_record,
    text_array,
)

S = State
log = logging.getLogger(__name__)

ALLOWED: dict[State, frozenset[State]] = {
    # claim by the dispatcher; cancel (opt-out / reply stops the sequence); dead (replay refused)
    S.QUEUED: frozenset({S.DISPATCHED, S.CANCELLED, S.DEAD}),
    # worker starts generating or sending; recovery of stuck work; opt-out seen by the worker
    S.DISPATCHED: frozenset({S.GENERATING, S.SENDING, S.QUEUED, S.APPROVED, S.CANCELLED, S.DEAD}),
    # draft for review; autonomous draft routed to send; retry (429/transient/stuck); failure
    S.GENERATING: frozenset({S.AWAITING_APPROVAL, S.DISPATCHED, S.QUEUED, S.DEAD, S.CANCELLED}),
    S.AWAITING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.CANCELLED}),
    # the approved-send path: claimed by the dispatcher under owner limits, no LLM
    S.APPROVED: frozenset({S.DISPATCHED, S.CANCELLED}),
    # SMTP outcome recorded; stuck/transient -> back to approved (same Message-ID on resend)
    S.SENDING: frozenset({S.SENT, S.APPROVED, S.DEAD, S.CANCELLED}),
    # replay: back to the queue (generation failed) or to approved (send failed); or give up
    S.DEAD: frozenset({S.QUEUED, S.APPROVED, S.CANCELLED}),
    S.SENT: frozenset(),
    S.REJECTED: frozenset(),
    S.CANCELLED: frozenset(),
}

# The state groups: every module that asks "is this row ...?" asks here.
TERMINAL = frozenset(state for state, targets in ALLOWED.items() if not targets)
UNFINISHED = frozenset(State) - TERMINAL - {S.DEAD}
# Waiting, no worker on it: a sequence stop or an operator's action may still change it.
AT_REST = (S.QUEUED, S.AWAITING_APPROVAL, S.APPROVED)
# Handed to a worker and not back yet: it counts against its owner's day, and is recovered if stuck.
IN_FLIGHT = (S.DISPATCHED, S.GENERATING, S.SENDING)
# Holding (or about to hold) an LLM reservation.
LLM_IN_FLIGHT = (S.DISPATCHED, S.GENERATING)
# Ended without an email leaving.
ENDED_UNSENT = (S.CANCELLED, S.DEAD, S.REJECTED)
# A reply not written yet: a later message from the same lead joins it instead of a second reply.
REPLY_JOINABLE = (S.QUEUED, S.DISPATCHED, S.GENERATING)


def back_to_queue(outreach: Outreach, *, sendable: bool = True) -> State:
    """Where work goes back to wait (a retry, recovery, a replay): APPROVED when it has a
    sendable written draft (the send is what failed: the LLM is never paid twice for one
    email), else QUEUED to be written. `sendable=False`: the draft may not go out (it failed
    the policy check) and is written again."""
    return S.APPROVED if outreach.draft_body and sendable else S.QUEUED


class IllegalTransition(ValueError):
    """The move is not in the table: a programming error, never retried."""

    def __init__(self, from_: State, to: State, *, detail: str = "") -> None:
        allowed = ", ".join(sorted(ALLOWED[from_])) or "nothing (terminal state)"
        super().__init__(
            detail or f"Outreach cannot move from {from_} to {to}; from {from_} it may move to {allowed}."
        )


class TransitionLost(RuntimeError):
    """The row was not in the expected state: another process moved it first."""

    def __init__(self, outreach_id: int, from_: Iterable[State], to: State) -> None:
        self.outreach_id = outreach_id
        states = "/".join(sorted(from_))
        super().__init__(f"Outreach {outreach_id} was not {states} any more, so it was not moved to {to}.")


def _check(from_states: Sequence[State], to: State) -> None:
    for from_ in from_states:
        if to not in ALLOWED[from_]:
            raise IllegalTransition(from_, to)


def _as_states(from_: State | Iterable[State]) -> tuple[State, ...]:
    return (State(from_),) if isinstance(from_, str) else tuple(State(s) for s in from_)


def transition(
    *,
    outreach_id: int,
    from_: State | Iterable[State],
    to: State,
    note: str = "",
    error_class: ErrorClass | str = "",
    actor_id: int | None = None,
    guard: Q | None = None,
    owner_timezone: str | None = None,
    then: Callable[[], None] | None = None,
    **fields: Any,
) -> None:
    """Move one outreach from `from_` (one state or several) to `to`, setting `fields` too.
    `owner_timezone`: for SENT, the owner's time zone when the caller has it loaded (the day's
    count is kept in the owner's day; None: it is read). `then` runs once the move commits.

    `guard`: the row must match it too, checked under the same lock (e.g. "no message joined
    this reply since its draft was started": nurture.writing.generation). Raises IllegalTransition if
    the table forbids it, TransitionLost if the row was not in `from_` (or failed `guard`). The event row (and for SENT, the owner's count for the day) is written in
    the same transaction as the move.
    """
    from_states = _as_states(from_)
    _check(from_states, to)
    if error_class:  # the row keeps its latest failure class; the event keeps each one
        fields["error_class"] = error_class
    now = timezone.now()
    if to == S.SENT:
        fields.setdefault("sent_at", now)
    event = {"to_state": to, "at": now, "error_class": error_class, "note": note, "actor_id": actor_id}
    with transaction.atomic():
        move = _move_one_statement if connection.vendor == "postgresql" else _move_portable
        previous = move(
            outreach_id=outreach_id,
            from_states=from_states,
            guard=guard,
            values={"state": to, "state_changed_at": now, "updated_at": now, **fields},
            event=event,
        )
        if previous is None:
            raise TransitionLost(outreach_id, from_states, to)
        if to == S.SENT:
            owner_daily_sends_record(owner_id=previous[2], sent_at=fields["sent_at"], zone=owner_timezone)
        # Counted by the winner of the move only, committed (or rolled back) with it.
        counted = Move(
            from_state=previous[0],
            to=to,
            error_class=str(error_class),
            tier=previous[3],
            at=now,
            due_at=max(previous[4], min(previous[5], now)),
            approved_at=fields.get("approved_at", previous[6]),
            llm_calls=fields.get("llm_calls", 0),
            tokens=fields.get("tokens_used", 0),
            owner_id=previous[2],
            kind=previous[7],
            reply_class=previous[8],
        )
        if reply_decided(counted):  # a person's decision, counted per organization: one more read
            organization_id = Owner.objects.filter(pk=previous[2]).values_list("organization_id", flat=True)
            counted = dataclasses.replace(counted, organization_id=organization_id.first())
        counters_add(move_increments(counted))
        if then is not None:
            transaction.on_commit(then)
    log.info(
        "outreach %s: %s -> %s%s",
        outreach_id,
        previous[0],
        to,
        f" ({note})" if note else "",
        extra={
            "outreach_id": outreach_id,
            "owner_id": previous[2],
            "tier": previous[3],
            "state": str(to),
            "from_state": previous[0],
            "error_class": str(error_class),
        },
    )


# What a move reads of the row before it (the history's from-state and attempt, the counters'
# tier, times, owner, kind and reply class, the log's owner), in this order.
_PREVIOUS = (
    "state",
    "attempts",
    "owner_id",
    "tier",
    "created_at",
    "not_before",
    "approved_at",
    "kind",
    "reply_class",
)
_EVENT = ("to_state", "at", "error_class", "note", "actor_id")


def _move_portable(
    *,
    outreach_id: int,
    from_states: Sequence[State],
    guard: Q | None,
    values: dict[str, Any],
    event: dict[str, Any],
) -> tuple[Any, ...] | None:
    """Lock the row while it is in a from-state (SELECT ... FOR UPDATE: a racing mover blocks,
    then finds the row moved and loses), move it, write its history; the row as it was, or None."""
    previous = (
        Outreach.objects.select_for_update()
        .filter(id=outreach_id, state__in=from_states)
        .filter(guard or Q())
        .values_list(*_PREVIOUS)
        .first()
    )
    if previous is None:
        return None
    Outreach.objects.filter(id=outreach_id, state=previous[0]).update(**values)
    OutreachEvent.objects.create(
        outreach_id=outreach_id,
        from_state=previous[0],
        attempt=values.get("attempts", previous[1]),
        **event,
    )
    return previous


def _move_one_statement(
    *,
    outreach_id: int,
    from_states: Sequence[State],
    guard: Q | None,
    values: dict[str, Any],
    event: dict[str, Any],
) -> tuple[Any, ...] | None:
    """`_move_portable` as one PostgreSQL statement: lock (FOR UPDATE), update and history row
    in one round trip. The ORM compiles only what needs it (a column expression, the guard):
    a worker makes several moves per outreach and the ORM's three statements were a fifth of
    its CPU (bench/latency.py, py-spy)."""
    table, events = Outreach._meta.db_table, OutreachEvent._meta.db_table
    sets, set_params = _set_clauses(values)
    where, where_params = "", cast("Sequence[Any]", ())
    if guard is not None:
        guarded = Outreach.objects.filter(guard).query
        sql, where_params = guarded.where.as_sql(guarded.get_compiler(connection=connection), connection)
        where = f" AND ({sql})"
    attempt = values.get("attempts")  # the history's attempt: the new one if set, else the row's
    columns = ", ".join(f'"{c}"' for c in _PREVIOUS)
    returning = ", ".join(f'prev."{c}"' for c in ("id", *_PREVIOUS))
    history_columns = ", ".join(("outreach_id", "from_state", "attempt", *_EVENT))
    history_values = ", ".join(
        ('"id"', '"state"', '"attempts"' if attempt is None else "%s", *["%s"] * len(_EVENT))
    )
    with connection.cursor() as cursor:
        cursor.execute(
            f'WITH prev AS (SELECT "id", {columns} FROM "{table}" '
            f'WHERE "id" = %s AND "state" = ANY(%s){where} FOR UPDATE), '
            f'moved AS (UPDATE "{table}" SET {", ".join(sets)} FROM prev WHERE "{table}"."id" = prev."id" '
            f"RETURNING {returning}), "
            f'history AS (INSERT INTO "{events}" ({history_columns}) SELECT {history_values} FROM moved) '
            f"SELECT {columns} FROM moved",
            [
                outreach_id,
                [str(s) for s in from_states],
                *where_params,
                *set_params,
                *([] if attempt is None else [attempt]),
                *(event[c] for c in _EVENT),
            ],
        )
        return cursor.fetchone()


def _set_clauses(values: dict[str, Any]) -> tuple[list[str], list[Any]]:
    """An UPDATE's `"column" = ...` clauses for `values` and their parameters. The ORM compiles
    only what needs it: a column expression (F("send_attempts") + 1, the row's own value)."""
    sets: list[str] = []
    params: list[Any] = []
    for name, value in values.items():
        field = Outreach._meta.get_field(name)
        if hasattr(value, "resolve_expression"):
            query = UpdateQuery(Outreach)
            expression = value.resolve_expression(query, allow_joins=False, for_save=True)
            sql, value_params = query.get_compiler(connection=connection).compile(expression)
        else:
            sql, value_params = "%s", [field.get_db_prep_save(value, connection)]  # type: ignore[union-attr]
        sets.append(f'"{field.column}" = {sql}')  # type: ignore[union-attr]
        params += value_params
    return sets, params


# Pauses before trying a durable move again on a fresh database connection.
DURABLE_RETRY_PAUSES_S = (0.5, 2.0)


def transition_durably(
    *,
    outreach_id: int,
    from_: State | Iterable[State],
    to: State,
    then: Callable[[], None] | None = None,
    **kwargs: Any,
) -> None:
    """`transition()` for a move that records work which cannot be taken back: an email the
    server accepted (SENT), a draft the provider was paid for. If the database connection died
    while that work ran (terminated, restarted, failed over), the move is tried again on a
    fresh connection: left where it was, the row would be recovered and the work done twice.

    `then` runs once the move is known to be committed (on commit, or when a retry finds that
    an earlier try did commit before its connection died), so it must be safe to run twice,
    like enqueueing a task whose first step is a guarded move. Inside an outer transaction it
    cannot retry (that transaction died with its connection): it is then a plain transition.
    """
    retried = False
    pauses = () if connection.in_atomic_block else DURABLE_RETRY_PAUSES_S
    for pause in (*pauses, None):
        try:
            transition(outreach_id=outreach_id, from_=from_, to=to, then=then, **kwargs)
            return
        except TransitionLost:
            if retried and Outreach.objects.filter(pk=outreach_id, state=to).exists():
                if then is not None:
                    then()
                return  # an earlier try committed before its connection died
            raise
        except (OperationalError, InterfaceError):
            if pause is None:
                raise
            log.warning(
                "outreach %s: recording %s failed on a dead database connection, retrying",
                outreach_id,
                to,
                exc_info=True,
                extra={"outreach_id": outreach_id, "state": str(to)},
            )
            connection.close()
            time.sleep(pause)
            retried = True


def transition_many(
    *,
    outreach_ids: Sequence[int],
    from_: State | Iterable[State],
    to: State,
    note: str = "",
    error_class: ErrorClass | str = "",
    at: datetime | None = None,
    each: Mapping[str, Sequence[Any]] | None = None,
    **fields: Any,
) -> list[int]:
    """Move every row of `outreach_ids` still in `from_` to `to`; return the ids that moved.

    `at`: the caller's clock for the move (a dispatch cycle's or an expiry run's `now`), written
    as the rows' `state_changed_at`, which stuck recovery and expiry later compare with their
    own `now`: a run decides on one clock whether it is live, a test or a replay (default: the
    wall clock). The history events keep the wall-clock time they were written.

    `fields` are set on every moved row; `each` sets fields of each row's own, field name ->
    one value per id of `outreach_ids`, in their order (the claim's reservation ids and
    routes): in the move's own UPDATE, so a claimed row is written once, not twice.

    Rows locked by another transaction are skipped (SKIP LOCKED on PostgreSQL), not waited
    for: two dispatchers claiming overlapping ids end with disjoint sets. On SQLite the
    IMMEDIATE transaction already holds the database's only write lock, so the conditional
    UPDATE alone is enough there.
    """
    from_states = _as_states(from_)
    _check(from_states, to)
    if to == S.SENT:  # each SENT is recorded after its own SMTP call, and counted for its owner
        raise IllegalTransition(
            from_states[0], to, detail="record SENT one outreach at a time with transition()"
        )
    each = each or {}
    if any(len(values) != len(outreach_ids) for values in each.values()):
        raise ValueError("transition_many: `each` needs one value per id of outreach_ids, in their order")
    if not outreach_ids:
        return []
    now = at or timezone.now()
    move = _move_many_one_statement if connection.vendor == "postgresql" else _move_many_portable
    with transaction.atomic():
        rows = move(
            outreach_ids=outreach_ids,
            from_states=from_states,
            values={"state": to, "state_changed_at": now, "updated_at": now, **fields},
            each=each,
            event={"to_state": to, "error_class": error_class, "note": note},
        )
        ids = [row[0] for row in rows]
        if not ids:
            return []
        # Bulk moves are claims, recoveries and cancels: only their claims per owner, dead
        # letters, retries and 429s count (no draft is generated, decided or sent in bulk).
        # Counted by (from state, owner), each from state's move worked out once
        # (moves_increments), not a Move per row or per owner.
        alike = Counter((state, owner_id) for _oid, state, _attempts, owner_id in rows)
        increments, owners = moves_increments(alike, to=to, error_class=str(error_class))
        counters_add(increments, owners=owners)
    log.info(
        "%d outreach: -> %s%s",
        len(ids),
        to,
        f" ({note})" if note else "",
        extra={"outreach_ids": ids, "state": str(to)},
    )
    return ids


def _move_many_portable(
    *,
    outreach_ids: Sequence[int],
    from_states: Sequence[State],
    values: dict[str, Any],
    each: Mapping[str, Sequence[Any]],
    event: dict[str, Any],
) -> list[tuple[Any, ...]]:
    """Lock the rows still in a from-state (skipping those another transaction holds), move
    them, set each one's own fields, write their history; (id, state, attempts, owner id) of
    each moved row as it was."""
    rows = list(
        Outreach.objects.select_for_update(skip_locked=True)
        .filter(id__any=outreach_ids, state__in=from_states)
        .values_list("id", "state", "attempts", "owner_id")
    )
    ids = [row[0] for row in rows]
    if not ids:
        return []
    Outreach.objects.filter(id__any=ids, state__in=from_states).update(**values)
    OutreachEvent.objects.bulk_create(
        OutreachEvent(outreach_id=oid, from_state=state, attempt=attempts, **event)
        for oid, state, attempts, _owner_id in rows
    )
    if each:
        position = {oid: i for i, oid in enumerate(outreach_ids)}
        for oid in ids:
            Outreach.objects.filter(id=oid).update(**{name: v[position[oid]] for name, v in each.items()})
    return rows


def _move_many_one_statement(
    *,
    outreach_ids: Sequence[int],
    from_states: Sequence[State],
    values: dict[str, Any],
    each: Mapping[str, Sequence[Any]],
    event: dict[str, Any],
) -> list[tuple[Any, ...]]:
    """`_move_many_portable` as one PostgreSQL statement: lock (FOR UPDATE SKIP LOCKED), update
    with each row's own fields, and history rows in one round trip. A claim of 500 rows spent
    more time in the ORM building and binding 500 event instances (and in a second UPDATE for
    the reservations) than PostgreSQL spent writing them (bench/dispatch.py, 2026-11-28)."""
    table, events = Outreach._meta.db_table, OutreachEvent._meta.db_table
    sets, set_params = _set_clauses(values)
    own_from, own_where = "", ""
    own_params: list[Any] = []
    if each:
        own_fields = [Outreach._meta.get_field(name) for name in each]
        own_columns = [f"v{i}" for i in range(len(own_fields))]
        own_from = (
            ", unnest(%s::bigint[], "
            + ", ".join(f"%s::{field.cast_db_type(connection)}[]" for field in own_fields)  # type: ignore[union-attr]
            + f") AS own(id, {', '.join(own_columns)})"
        )
        own_where = " AND own.id = prev.id"
        own_params = [
            int_array(outreach_ids),
            *(
                _array([field.get_db_prep_save(v, connection) for v in each[field.name]])  # type: ignore[union-attr]
                for field in own_fields
            ),
        ]
        sets += [f'"{field.column}" = own.{c}' for field, c in zip(own_fields, own_columns, strict=True)]  # type: ignore[union-attr]
    history_columns = ", ".join(("outreach_id", "from_state", "attempt", "at", *event))
    with connection.cursor() as cursor:
        cursor.execute(
            f'WITH prev AS (SELECT "id", "state", "attempts", "owner_id" FROM "{table}" '
            f'WHERE "id" = ANY(%s::bigint[]) AND "state" = ANY(%s) FOR UPDATE SKIP LOCKED), '
            f'moved AS (UPDATE "{table}" SET {", ".join(sets)} FROM prev{own_from} '
            f'WHERE "{table}"."id" = prev."id"{own_where} '
            f'RETURNING prev."id", prev."state", prev."attempts", prev."owner_id"), '
            f'history AS (INSERT INTO "{events}" ({history_columns}) '
            f'SELECT "id", "state", "attempts", %s, {", ".join(["%s"] * len(event))} FROM moved) '
            f'SELECT "id", "state", "attempts", "owner_id" FROM moved',
            [
                int_array(outreach_ids),
                [str(s) for s in from_states],
                *set_params,
                *own_params,
                timezone.now(),  # the events' wall clock, as auto_now_add writes it
                *(str(v) for v in event.values()),
            ],
        )
        return cursor.fetchall()


def _array(values: list[Any]) -> list[Any] | str:
    """One field's values for an array parameter: strings as one array literal (`text_array`:
    not quoted one by one in Python), anything else as the list."""
    return text_array(values) if all(isinstance(v, str) for v in values) else values


def update_in_place(
    *, outreach_id: int, states: Iterable[State], note: str, actor_id: int | None = None, **fields: Any
) -> bool:
    """Change `fields` of one outreach while it is in one of `states`, without moving it, and
    record that in its history (an event from its state to the same state). Return whether
    the row was still in `states` (False: someone moved it first; nothing was written).

    For an operator's change of a row at rest (retry now, reassign): the state guard in the
    WHERE clause is what keeps it off work a worker or the dispatcher has just claimed.
    """
    from_states = tuple(State(s) for s in states)
    now = timezone.now()
    with transaction.atomic():
        state = (
            Outreach.objects.select_for_update()
            .filter(id=outreach_id, state__in=from_states)
            .values_list("state", "attempts")
            .first()
        )
        if state is None:
            return False
        Outreach.objects.filter(id=outreach_id).update(updated_at=now, **fields)
        OutreachEvent.objects.create(
            outreach_id=outreach_id,
            from_state=state[0],
            to_state=state[0],
            attempt=state[1],
            note=note,
            actor_id=actor_id,
        )
    return True
