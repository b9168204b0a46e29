from __future__ import annotations

import multiprocessing
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import F, Q
from django.utils import timezone

from outreach.models import OutreachEvent, State
from outreach.transitions import (
    IllegalTransition,
    TransitionLost,
    _move_many_one_statement,
    _move_many_portable,
    _move_one_statement,
    _move_portable,
    transition,
    transition_many,
)
from tests.factories import make_outreach
from tests.subprocesses import race_transition

# Every move, written out by hand (not read from outreach.transitions.ALLOWED, so a wrong row
# there fails a test): "x" = allowed, "." = refused. Rows are from-states, columns to-states.
MOVES = """
                   queued dispatched generating awaiting approved sending sent rejected cancelled dead
queued               .        x         .          .        .       .      .     .        x       x
dispatched           x        .         x          .        x       x      .     .        x       x
generating           x        x         .          x        .       .      .     .        x       x
awaiting_approval    .        .         .          .        x       .      .     x        x       .
approved             .        x         .          .        .       .      .     .        x       .
sending              .        .         .          .        x       .      x     .        x       x
sent                 .        .         .          .        .       .      .     .        .       .
rejected             .        .         .          .        .       .      .     .        .       .
cancelled            .        .         .          .        .       .      .     .        .       .
dead                 x        .         .          .        x       .      .     .        x       .
"""


def _moves(table: str) -> dict[tuple[State, State], bool]:
    header, *rows = table.strip().splitlines()
    targets = [State(name if name != "awaiting" else "awaiting_approval") for name in header.split()]
    moves = {}
    for row in rows:
        source, *marks = row.split()
        moves.update({(State(source), to): mark == "x" for to, mark in zip(targets, marks, strict=True)})
    return moves


EXPECTED = _moves(MOVES)
ALLOWED_PAIRS = [pair for pair, allowed in EXPECTED.items() if allowed]
REFUSED_PAIRS = [pair for pair, allowed in EXPECTED.items() if not allowed]


def test_the_hand_written_table_names_every_pair_of_states() -> None:
    assert set(EXPECTED) == {(f, t) for f in State for t in State}


def test_every_state_the_issue_names_exists() -> None:
    names = {
        "QUEUED",
        "DISPATCHED",
        "GENERATING",
        "AWAITING_APPROVAL",
        "APPROVED",
        "SENDING",
        "SENT",
        "REJECTED",
        "CANCELLED",
        "DEAD",
    }
    assert names <= {s.name for s in State}


@pytest.mark.django_db
@pytest.mark.parametrize(("from_", "to"), ALLOWED_PAIRS)
def test_allowed_transition_moves_and_records_history(from_: State, to: State) -> None:
    # given an outreach in the from-state
    outreach = make_outreach(state=from_)
    # when it is moved
    transition(outreach_id=outreach.pk, from_=from_, to=to, note="test", attempts=2)
    # then the row moved, the field was set and one history row says so
    outreach.refresh_from_db()
    assert (outreach.state, outreach.attempts) == (to, 2)
    event = OutreachEvent.objects.get(outreach=outreach)
    assert (event.from_state, event.to_state, event.note, event.attempt) == (from_, to, "test", 2)


@pytest.mark.django_db
@pytest.mark.parametrize(("from_", "to"), REFUSED_PAIRS)
def test_refused_transition_raises_and_changes_nothing(from_: State, to: State) -> None:
    outreach = make_outreach(state=from_)
    with pytest.raises(IllegalTransition, match=f"cannot move from {from_} to {to}"):
        transition(outreach_id=outreach.pk, from_=from_, to=to)
    outreach.refresh_from_db()
    assert outreach.state == from_
    assert not OutreachEvent.objects.filter(outreach=outreach).exists()


@pytest.mark.django_db
def test_lost_transition_when_row_already_moved() -> None:
    # given an outreach someone else already dispatched
    outreach = make_outreach(state=State.DISPATCHED)
    # when a second dispatcher tries to claim it from QUEUED, it loses and nothing is written
    with pytest.raises(TransitionLost, match="was not queued"):
        transition(outreach_id=outreach.pk, from_=State.QUEUED, to=State.DISPATCHED)
    outreach.refresh_from_db()
    assert outreach.state == State.DISPATCHED
    assert OutreachEvent.objects.count() == 0


@pytest.mark.django_db
def test_transition_many_moves_only_rows_still_in_from_state() -> None:
    queued = [make_outreach() for _ in range(3)]
    taken = make_outreach(state=State.DISPATCHED)
    moved = transition_many(
        outreach_ids=[o.pk for o in [*queued, taken]], from_=State.QUEUED, to=State.DISPATCHED
    )
    assert sorted(moved) == sorted(o.pk for o in queued)
    assert OutreachEvent.objects.filter(to_state=State.DISPATCHED).count() == 3


@pytest.mark.django_db
def test_transition_many_writes_each_moved_rows_event_from_the_state_it_left() -> None:
    # given rows in two states, one with earlier attempts, and one in neither
    generating = make_outreach(state=State.GENERATING, attempts=2)
    dispatched = make_outreach(state=State.DISPATCHED)
    sent = make_outreach(state=State.SENT)
    before = timezone.now()
    # when the bulk move takes both states back to the queue
    moved = transition_many(
        outreach_ids=[generating.pk, dispatched.pk, sent.pk],
        from_=[State.GENERATING, State.DISPATCHED],
        to=State.QUEUED,
        note="worker lost: it's back",
        error_class="transient",
        at=before - timedelta(days=1),  # the rows' clock; the events keep the wall clock
    )
    # then each moved row has one event: from its own state, its attempts, the note and class
    assert sorted(moved) == sorted([generating.pk, dispatched.pk])
    events = {
        e.outreach_id: (e.from_state, e.to_state, e.attempt, e.error_class, e.note, e.actor_id)
        for e in OutreachEvent.objects.all()
    }
    assert events == {
        generating.pk: ("generating", "queued", 2, "transient", "worker lost: it's back", None),
        dispatched.pk: ("dispatched", "queued", 0, "transient", "worker lost: it's back", None),
    }
    assert all(before <= e.at <= timezone.now() for e in OutreachEvent.objects.all())


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_processes_racing_the_same_transition_exactly_one_wins() -> None:
    # given a committed queued outreach on PostgreSQL
    assert connection.vendor == "postgresql"
    outreach = make_outreach()
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    # when two processes try to claim it at the same moment
    procs = [
        ctx.Process(
            target=race_transition, args=(connection.settings_dict["NAME"], outreach.pk, barrier, results)
        )
        for _ in range(2)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    outcomes = sorted(results.get(timeout=5) for _ in procs)
    # then exactly one wins and exactly one history row exists
    assert outcomes == ["lost", "won"]
    assert OutreachEvent.objects.filter(outreach_id=outreach.pk, to_state=State.DISPATCHED).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("move", [_move_portable, _move_one_statement], ids=["portable", "one statement"])
def test_both_ways_of_moving_a_row_write_the_same_row_and_history(move: Any) -> None:
    # given a sending outreach, and a move with a column expression, a guard, an actor and a
    # class (PostgreSQL runs the one-statement move; SQLite the portable one: both must agree)
    outreach = make_outreach(state=State.SENDING, send_attempts=2, inbound_joined=1, attempts=1)
    actor = User.objects.create(username="op")
    now = timezone.now()
    kwargs: dict[str, Any] = {
        "outreach_id": outreach.pk,
        "from_states": (State.DISPATCHED, State.SENDING),
        "event": {
            "to_state": State.APPROVED,
            "at": now,
            "error_class": "transient",
            "note": "n",
            "actor_id": actor.pk,
        },
    }
    values = {"state": State.APPROVED, "state_changed_at": now, "send_attempts": F("send_attempts") - 1}
    # when the guard does not hold, nothing moves
    assert move(**kwargs, guard=Q(inbound_joined__gt=1), values=values) is None
    # when it holds, the row moves and its history says from where, with the row's attempt
    previous = move(**kwargs, guard=Q(inbound_joined=1), values=values)
    assert previous[:4] == (State.SENDING, 1, outreach.owner_id, outreach.tier)
    outreach.refresh_from_db()
    assert (outreach.state, outreach.send_attempts, outreach.state_changed_at) == (State.APPROVED, 1, now)
    event = OutreachEvent.objects.get(outreach=outreach)
    assert (
        event.from_state,
        event.to_state,
        event.attempt,
        event.error_class,
        event.note,
        event.actor_id,
    ) == (State.SENDING, State.APPROVED, 1, "transient", "n", actor.pk)
    assert now <= event.at < now + timedelta(seconds=5)
    # and a move setting the attempt records the new one; a lost race returns None
    assert move(
        **{**kwargs, "from_states": (State.APPROVED,)},
        guard=None,
        values={"state": State.DISPATCHED, "attempts": 3},
    )
    assert OutreachEvent.objects.filter(outreach=outreach).latest("id").attempt == 3
    assert move(**{**kwargs, "from_states": (State.SENDING,)}, guard=None, values=values) is None


@pytest.mark.django_db
@pytest.mark.parametrize(
    "move", [_move_many_portable, _move_many_one_statement], ids=["portable", "one statement"]
)
def test_both_ways_of_moving_rows_in_bulk_write_the_same_rows_and_history(move: Any) -> None:
    # given two queued rows (one with earlier attempts) and one already taken (PostgreSQL runs
    # the one-statement move; SQLite the portable one: both must agree)
    first, second = make_outreach(attempts=2), make_outreach()
    taken = make_outreach(state=State.DISPATCHED)
    now = timezone.now() - timedelta(days=1)
    # when they move with fields for all and each row's own (one holding what an array
    # literal escapes: quotes, a comma, braces, a backslash)
    odd = 'a,"b"{c}\\'
    rows = move(
        outreach_ids=[second.pk, taken.pk, first.pk],
        from_states=(State.QUEUED,),
        values={"state": State.DISPATCHED, "state_changed_at": now, "blocked_reason": ""},
        each={"reservation_id": ["r2", "rt", "r1"], "llm_route": ["b", "t", odd]},
        event={"to_state": State.DISPATCHED, "error_class": "", "note": "claim"},
    )
    # then the rows still queued moved, each with its own values, and each has its history
    assert sorted(rows) == sorted(
        [(first.pk, State.QUEUED, 2, first.owner_id), (second.pk, State.QUEUED, 0, second.owner_id)]
    )
    for outreach, own in ((first, ("r1", odd)), (second, ("r2", "b")), (taken, ("", ""))):
        outreach.refresh_from_db()
        assert (outreach.reservation_id, outreach.llm_route) == own
    assert (first.state, first.state_changed_at) == (State.DISPATCHED, now)
    events = {
        e.outreach_id: (e.from_state, e.to_state, e.attempt, e.error_class, e.note, e.actor_id)
        for e in OutreachEvent.objects.all()
    }
    assert events == {
        first.pk: (State.QUEUED, State.DISPATCHED, 2, "", "claim", None),
        second.pk: (State.QUEUED, State.DISPATCHED, 0, "", "claim", None),
    }
    assert all(now < e.at <= timezone.now() for e in OutreachEvent.objects.all())


@pytest.mark.django_db
def test_transition_many_wants_each_rows_own_value_for_every_id() -> None:
    outreach = make_outreach()
    with pytest.raises(ValueError, match="one value per id"):
        transition_many(
            outreach_ids=[outreach.pk], from_=State.QUEUED, to=State.DISPATCHED, each={"llm_route": []}
        )
