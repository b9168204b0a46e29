"""Counters counted where the event happens (outreach.counters): pure increments per move,
and the transaction they are counted in."""

from __future__ import annotations

import multiprocessing
import os
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from outreach.counters import (
    COMPLETION_LATENCY,
    OWNER_COLUMNS,
    SHARDS,
    Increment,
    Move,
    counters_add,
    counters_read,
    move_increments,
    moves_increments,
    observation,
    reply_classified,
)
from outreach.models import ErrorClass, MetricCounter, Outreach, OwnerCounter, State
from outreach.tiers import Tier
from outreach.transitions import TransitionLost, transition, transition_many
from tests.factories import make_lead, make_outreach, make_owner
from tests.subprocesses import send_all

S = State
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_a_send_counts_sent_and_its_latency_from_due() -> None:
    move = Move(
        from_state=S.SENDING,
        to=S.SENT,
        error_class="",
        tier=Tier.REPLY,
        at=T0,
        due_at=T0 - timedelta(seconds=40),
    )
    assert move_increments(move) == [
        Increment("outreach_sent", (), 1),
        Increment("outreach_completion_latency_seconds_bucket", (("tier", "reply"), ("le", "60.0")), 1),
        Increment("outreach_completion_latency_seconds_sum_ms", (("tier", "reply"),), 40_000),
        Increment("outreach_completion_latency_seconds_count", (("tier", "reply"),), 1),
    ]


def test_an_approved_send_is_sent_but_its_completion_was_the_draft() -> None:
    move = Move(
        from_state=S.SENDING, to=S.SENT, error_class="", tier=Tier.INTRO, at=T0, due_at=T0, approved_at=T0
    )
    assert move_increments(move) == [Increment("outreach_sent", (), 1)]


def test_a_generated_draft_counts_its_calls_and_tokens() -> None:
    move = Move(
        from_state=S.GENERATING, to=S.AWAITING_APPROVAL, error_class="", tier=Tier.NUDGE,
        at=T0, due_at=T0 + timedelta(hours=1), llm_calls=3, tokens=900,
    )  # fmt: skip
    assert move_increments(move) == [
        Increment("outreach_generated", (("tier", "nudge"),), 1),
        Increment("outreach_llm_requests", (), 3),
        Increment("outreach_llm_tokens", (), 900),
        # due after the move (a clock skew): never a negative wait
        Increment("outreach_completion_latency_seconds_bucket", (("tier", "nudge"), ("le", "5.0")), 1),
        Increment("outreach_completion_latency_seconds_sum_ms", (("tier", "nudge"),), 0),
        Increment("outreach_completion_latency_seconds_count", (("tier", "nudge"),), 1),
    ]


@pytest.mark.parametrize(
    ("to", "error_class", "expected"),
    [
        (S.QUEUED, ErrorClass.TRANSIENT, [Increment("outreach_retries", (), 1)]),
        (S.QUEUED, ErrorClass.RATE_LIMITED, [Increment("outreach_provider_429s", (), 1)]),
        (S.DEAD, ErrorClass.POLICY, [Increment("outreach_dead_letters", (("class", "policy"),), 1)]),
        (S.DEAD, ErrorClass.RATE_LIMITED, [
            Increment("outreach_dead_letters", (("class", "rate_limited"),), 1),
            Increment("outreach_provider_429s", (), 1),
        ]),
        (S.CANCELLED, "", []),
    ],
)  # fmt: skip
def test_failures_count_by_their_class(to: State, error_class: str, expected: list[Increment]) -> None:
    move = Move(from_state=S.GENERATING, to=to, error_class=error_class, tier=Tier.INTRO)
    assert move_increments(move) == expected


def test_a_send_of_an_owner_counts_for_the_owner_too() -> None:
    move = Move(from_state=S.SENDING, to=S.SENT, error_class="", owner_id=7)
    assert move_increments(move) == [
        Increment("outreach_sent", (), 1),
        Increment("outreach_owner_sent", (("owner_id", "7"),), 1),
    ]


@pytest.mark.parametrize(
    ("from_state", "counted"),
    [
        (S.QUEUED, True),  # the dispatcher's claim to write
        (S.APPROVED, True),  # its claim of an approved draft to send
        (S.GENERATING, False),  # an autonomous draft routed to send: claimed already
    ],
)
def test_a_claim_counts_as_dispatched_for_its_owner(from_state: State, counted: bool) -> None:
    # the definition of orchestrator.metrics.activity.CLAIMED, the dashboard's "dispatched"
    move = Move(from_state=from_state, to=S.DISPATCHED, error_class="", owner_id=7)
    dispatched = Increment("outreach_owner_dispatched", (("owner_id", "7"),), 1)
    assert (dispatched in move_increments(move)) is counted


@pytest.mark.parametrize(
    ("to", "kind", "reply_class", "expected"),
    [
        (S.APPROVED, Outreach.Kind.REPLY, "question", "approved"),
        (S.REJECTED, Outreach.Kind.REPLY, "complaint", "rejected"),
        (S.CANCELLED, Outreach.Kind.REPLY, "question", None),  # expired: nobody decided
        (S.APPROVED, Outreach.Kind.INTRO, "", None),  # not a reply
        (S.APPROVED, Outreach.Kind.REPLY, "", None),  # a reply never triaged: no class
    ],
)
def test_a_persons_decision_on_a_reply_draft_counts_per_organization_and_class(
    to: State, kind: str, reply_class: str, expected: str | None
) -> None:
    move = Move(
        from_state=S.AWAITING_APPROVAL, to=to, error_class="", owner_id=7, kind=kind,
        reply_class=reply_class, organization_id=3,
    )  # fmt: skip
    decided = [i for i in move_increments(move) if i.name == "outreach_reply_drafts_decided"]
    if expected is None:
        assert decided == []
    else:
        labels = (("organization_id", "3"), ("reply_class", reply_class), ("decision", expected))
        assert decided == [Increment("outreach_reply_drafts_decided", labels, 1)]


def test_a_classification_counts_under_its_class_and_who_decided() -> None:
    assert reply_classified(organization_id=3, reply_class="referral", by="person") == [
        Increment(
            "outreach_replies_classified",
            (("organization_id", "3"), ("reply_class", "referral"), ("by", "person")),
            1,
        )
    ]


def test_an_observation_past_the_last_bucket_goes_to_inf() -> None:
    assert observation(COMPLETION_LATENCY, (), 100_000)[0].labels == (("le", "+Inf"),)


@pytest.mark.django_db
def test_a_committed_move_is_counted_once_and_a_lost_one_not_at_all() -> None:
    # given a row sending
    outreach = make_outreach(state=S.SENDING)
    due = timezone.now() - timedelta(seconds=100)
    Outreach.objects.filter(pk=outreach.pk).update(created_at=due, not_before=due)
    # when it is sent, and a racing duplicate tries the same move
    transition(outreach_id=outreach.pk, from_=S.SENDING, to=S.SENT)
    with pytest.raises(TransitionLost):
        transition(outreach_id=outreach.pk, from_=S.SENDING, to=S.SENT)
    # then one send and one completion are counted
    stored = counters_read()
    assert stored["outreach_sent"] == {(): 1}
    assert stored["outreach_completion_latency_seconds_count"] == {(("tier", "intro"),): 1}
    assert stored["outreach_completion_latency_seconds_bucket"] == {(("le", "120.0"), ("tier", "intro")): 1}


@pytest.mark.django_db
def test_a_move_rolled_back_counts_nothing() -> None:
    outreach = make_outreach(state=S.GENERATING)

    def move_then_fail() -> None:
        with transaction.atomic():
            transition(outreach_id=outreach.pk, from_=S.GENERATING, to=S.DEAD, error_class=ErrorClass.POLICY)
            raise RuntimeError("the dead letter could not be written")

    with pytest.raises(RuntimeError):
        move_then_fail()
    assert "outreach_dead_letters" not in counters_read()


@pytest.mark.django_db
def test_every_process_shard_adds_to_one_total() -> None:
    # given two other processes' shards of the same series
    MetricCounter.objects.create(name="outreach_sent", labels="", shard=(os.getpid() + 1) % SHARDS, value=5)
    MetricCounter.objects.create(name="outreach_sent", labels="", shard=(os.getpid() + 2) % SHARDS, value=7)
    # when this process counts twice
    counters_add([Increment("outreach_sent", (), 1)])
    counters_add([Increment("outreach_sent", (), 1)])
    # then the total is every shard's sum, and this process used one row
    assert counters_read()["outreach_sent"] == {(): 14}
    assert MetricCounter.objects.filter(name="outreach_sent").count() == 3


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_processes_racing_to_send_the_same_rows_count_each_send_once() -> None:
    # given 30 committed rows sending, and four processes each trying to record all of them
    ids = [make_outreach(state=S.SENDING).pk for _ in range(30)]
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(4), ctx.Queue()
    procs = [
        ctx.Process(target=send_all, args=(connection.settings_dict["NAME"], ids[::step], barrier, results))
        for step in (1, 1, 2, 3)
    ]
    # when they race
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
    wins = [results.get(timeout=5) for _ in procs]
    # then every row was sent once, and the counter, summed over the processes' shards, says 30
    assert sum(wins) == 30
    assert counters_read()["outreach_sent"] == {(): 30}


@pytest.mark.django_db
def test_a_bulk_move_counts_each_row_of_each_owner() -> None:
    # given five queued rows of one owner and three of another
    a, b = make_owner(), make_owner()
    first = [make_outreach(lead=make_lead(owner=a)) for _ in range(5)]
    second = [make_outreach(lead=make_lead(owner=b)) for _ in range(3)]
    # when one bulk move claims them all, and another dead-letters three of them
    ids = [o.pk for o in first + second]
    transition_many(outreach_ids=ids, from_=S.QUEUED, to=S.DISPATCHED)
    transition_many(outreach_ids=ids[3:6], from_=S.DISPATCHED, to=S.DEAD, error_class=ErrorClass.STUCK)
    # then each owner's claims are counted row by row, and each dead letter under its class
    stored = counters_read()
    assert stored["outreach_owner_dispatched"] == {
        (("owner_id", str(a.pk)),): 5,
        (("owner_id", str(b.pk)),): 3,
    }
    assert stored["outreach_dead_letters"] == {(("class", "stuck"),): 3}


def _totals(increments: list[Increment]) -> dict[tuple[str, tuple[tuple[str, str], ...]], int]:
    totals: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for inc in increments:
        totals[(inc.name, inc.labels)] = totals.get((inc.name, inc.labels), 0) + inc.value
    return {series: value for series, value in totals.items() if value}


@given(
    to=st.sampled_from([S.DISPATCHED, S.QUEUED, S.CANCELLED, S.DEAD, S.APPROVED]),
    error_class=st.sampled_from(["", *ErrorClass]),
    moved=st.dictionaries(
        st.tuples(
            st.sampled_from([S.QUEUED, S.APPROVED, S.DISPATCHED, S.GENERATING]), st.none() | st.integers(1, 5)
        ),
        st.integers(1, 4),
        max_size=8,
    ),
)
def test_bulk_moves_add_what_their_moves_one_by_one_add(
    to: State, error_class: str, moved: dict[tuple[str, int | None], int]
) -> None:
    one_by_one = [
        inc
        for (state, owner_id), n in moved.items()
        for _ in range(n)
        for inc in move_increments(
            Move(from_state=state, to=to, error_class=str(error_class), owner_id=owner_id)
        )
    ]
    bulk, owners = moves_increments(moved, to=to, error_class=str(error_class))
    # an owner's series come as what to add to each of its columns (OWNER_COLUMNS' order)
    per_owner = [
        Increment(name, (("owner_id", str(owner_id)),), adds[column])
        for owner_id, adds in owners.items()
        for column, name in enumerate(OWNER_COLUMNS)
    ]
    assert _totals([*bulk, *per_owner]) == _totals(one_by_one)


@pytest.mark.django_db
def test_series_whose_labels_hold_quotes_and_braces_are_stored_as_written() -> None:
    # given increments whose labels hold what the arrays' literals escape (quotes, backslashes,
    # braces), one series twice (a label's text is "key=value,...": values have no commas)
    odd = (("reply_class", 'say "yes" {now}\\'),)
    # when counted in one statement
    counters_add(
        [
            Increment("outreach_replies_classified", odd, 2),
            Increment("outreach_replies_classified", (("reply_class", "plain"),), 1),
            Increment("outreach_replies_classified", odd, 3),
        ]
    )
    # then each series reads back as counted, its labels as written
    assert counters_read()["outreach_replies_classified"] == {odd: 5, (("reply_class", "plain"),): 1}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("series", "model"),
    [
        # an owner's (a claim counts one per owner claimed), in OwnerCounter
        ("outreach_owner_dispatched", OwnerCounter),
        # any other labelled series, in MetricCounter
        ("outreach_replies_classified", MetricCounter),
    ],
)
def test_adding_to_stored_series_updates_them_in_place_without_new_index_entries(
    series: str, model: type[MetricCounter | OwnerCounter]
) -> None:
    # given 300 series, stored
    label = "owner_id" if model is OwnerCounter else "organization_id"
    increments = [Increment(series, ((label, str(n)),), 1) for n in range(300)]
    counters_add(increments)
    # when each is added to again, in the same transaction (so no version of a row can be
    # pruned in between: only the room each page kept can take the new ones)
    before = _counter_updates(model)
    counters_add(increments)
    updated, in_place = (after - was for after, was in zip(_counter_updates(model), before, strict=True))
    # then every update stayed on its row's page and wrote no index entry (a HOT update): the
    # tables keep room on their pages for them, and a claim of 500 owners' series costs half
    assert (updated, in_place) == (300, 300)


def _counter_updates(model: type[MetricCounter | OwnerCounter]) -> tuple[int, int]:
    """Rows of a counters' table updated, and of those HOT, in this transaction so far."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = %s",
            [model._meta.db_table],
        )
        row = cursor.fetchone()
    return (row[0], row[1]) if row else (0, 0)


@pytest.mark.django_db
def test_a_send_adds_to_its_owners_row_and_the_other_series_in_one_statement() -> None:
    # given what a send of an owner's email adds (the owner's series and the plain ones)
    owner = make_owner()
    sent = move_increments(Move(from_state=S.SENDING, to=S.SENT, error_class="", owner_id=owner.pk))
    # when counted
    with CaptureQueriesContext(connection) as queries:
        counters_add(sent)
    # then both tables were added to by one statement, the owner's series in its own row
    assert len(queries) == 1
    stored = counters_read()
    assert stored["outreach_sent"] == {(): 1}
    assert stored["outreach_owner_sent"] == {(("owner_id", str(owner.pk)),): 1}
    assert OwnerCounter.objects.get(owner_id=owner.pk).sent == 1
    assert not MetricCounter.objects.filter(name="outreach_owner_sent").exists()


@pytest.mark.django_db
def test_an_owners_series_reads_as_one_total_wherever_it_was_stored() -> None:
    # given an owner's claims in two shards of its row, and more in a MetricCounter row (as a
    # process of the code before migration 0033 wrote them while both ran)
    OwnerCounter.objects.create(owner_id=7, shard=(os.getpid() + 1) % SHARDS, dispatched=5)
    MetricCounter.objects.create(name="outreach_owner_dispatched", labels="owner_id=7", shard=0, value=2)
    counters_add([Increment("outreach_owner_dispatched", (("owner_id", "7"),), 1)])
    # then they read as one total, and the owner's other series, never added to, is not there
    stored = counters_read()
    assert stored["outreach_owner_dispatched"] == {(("owner_id", "7"),): 8}
    assert "outreach_owner_sent" not in stored


@pytest.mark.django_db
def test_an_owners_columns_and_its_increments_in_one_call_add_up() -> None:
    # given an owner's sends as increments and its claims as columns (as a bulk move gives
    # them: moves_increments), and another owner's columns alone
    dispatched, sent = OWNER_COLUMNS
    # when added in one call
    counters_add([Increment(sent, (("owner_id", "7"),), 2)], owners={7: [1, 0], 8: [0, 3]})
    # then each owner's series holds both, none lost to the other
    stored = counters_read()
    assert stored[dispatched] == {(("owner_id", "7"),): 1}
    assert stored[sent] == {(("owner_id", "7"),): 2, (("owner_id", "8"),): 3}


@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_the_owners_series_to_their_table_and_back() -> None:
    # given the counters before migration 0033: two owners' series, in shards, beside another
    before = [("outreach", "0032_metric_counter_pages_keep_room_for_updates")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    stored = executor.loader.project_state(before).apps.get_model("outreach", "MetricCounter")
    for name, labels, shard, value in [
        ("outreach_owner_dispatched", "owner_id=7", 0, 3),
        ("outreach_owner_dispatched", "owner_id=7", 1, 2),
        ("outreach_owner_sent", "owner_id=7", 0, 1),
        ("outreach_owner_dispatched", "owner_id=9", 0, 4),
        ("outreach_replies_classified", "by=rules,organization_id=7,reply_class=positive", 0, 6),
    ]:
        stored.objects.create(name=name, labels=labels, shard=shard, value=value)
    was = {(r.name, r.labels, r.shard, r.value) for r in stored.objects.all()}
    # when migrated
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    # then the owners' series are their rows, shard by shard, and read back as they were
    rows = {(r.owner_id, r.shard, r.dispatched, r.sent) for r in OwnerCounter.objects.all()}
    assert rows == {(7, 0, 3, 1), (7, 1, 2, 0), (9, 0, 4, 0)}
    assert list(MetricCounter.objects.values_list("name", flat=True)) == ["outreach_replies_classified"]
    totals = counters_read()
    assert totals["outreach_owner_dispatched"] == {(("owner_id", "7"),): 5, (("owner_id", "9"),): 4}
    assert totals["outreach_owner_sent"] == {(("owner_id", "7"),): 1}
    # and migrated back, they are MetricCounter's rows again, as they were
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    assert {(r.name, r.labels, r.shard, r.value) for r in stored.objects.all()} == was
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
