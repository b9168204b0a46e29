from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from devtools.bulk import SPREAD, rows_clone
from orchestrator.budget import Budget, Limits, Reservation, SendRules
from orchestrator.budget.mailboxes import MAILBOXES_PAUSED
from orchestrator.controls.spend import spend_cap_reason
from orchestrator.dispatch import reads
from orchestrator.dispatch.cycle import CURSOR_KEY, dispatch_cycle, window
from orchestrator.dispatch.cycle.cursor_state import LEADS_KEY, cursor_read
from orchestrator.dispatch.cycle.shell import PHASES
from orchestrator.dispatch.selection import Cursor, Pick, Position, Window
from orchestrator.dispatch.singleton import dispatch_lease
from orchestrator.models import Pause
from outreach.models import Lead, Mailbox, Outreach, OutreachEvent, Owner, State
from outreach.tiers import Tier
from tests.factories import (
    make_draft,
    make_lead,
    make_mailbox,
    make_org,
    make_outreach,
    make_owner,
    make_owners,
)
from tests.faults.helpers import outreach_table_locked
from tests.subprocesses import claim_overlapping, run_cycles

pytestmark = pytest.mark.django_db


def _cycle(budget: Budget, captured: Any, **kwargs: Any) -> Any:
    with captured(execute=True):
        return dispatch_cycle(budget=budget, **kwargs)


def test_cycle_serves_replies_first_round_robin_and_enqueues_ids_only(
    budget: Budget, redis_client: redis.Redis, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given three owners: one with a reply and a deep intro backlog, two with intros
    settings.DISPATCH_MAX_IN_FLIGHT = 4
    org = make_org()
    a, b, c = (make_owner(organization=org) for _ in range(3))
    reply = make_outreach(lead=make_lead(owner=a), kind=Outreach.Kind.REPLY)
    intros_a = [make_outreach(lead=make_lead(owner=a)) for _ in range(5)]
    intro_b = make_outreach(lead=make_lead(owner=b))
    intro_c = make_outreach(lead=make_lead(owner=c))
    # when one cycle runs with 4 slots
    report = _cycle(budget, django_capture_on_commit_callbacks)
    # then the reply goes first and the intro slots are shared round-robin, one per owner
    assert report.slots == 4
    assert report.picks[0].outreach_id == reply.pk
    assert set(report.generation) == {reply.pk, intro_b.pk, intro_c.pk, intros_a[0].pk}
    assert Outreach.objects.filter(state=State.DISPATCHED).count() == 4
    # and each claimed row holds its own reservation, and the broker got ids, not lead data
    reservations = set(
        Outreach.objects.filter(state=State.DISPATCHED).values_list("reservation_id", flat=True)
    )
    assert len(reservations) == 4
    assert "" not in reservations
    intros = [str(raw) for raw in redis_client.lrange("generation", 0, -1)]
    replies = [str(raw) for raw in redis_client.lrange("reply", 0, -1)]
    assert (len(intros), len(replies)) == (3, 1)  # the reply on its own lane
    assert not any("@prospect.example" in body for body in intros + replies)


def test_a_cycle_says_where_its_time_went_phase_by_phase(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any, caplog: Any
) -> None:
    # given an owner with an approved draft and intros to write
    settings.DISPATCH_MAX_IN_FLIGHT = 2
    owner = make_owner()
    make_draft(lead=make_lead(owner=owner), state=State.APPROVED)
    for _ in range(2):
        make_outreach(lead=make_lead(owner=owner))
    # when a cycle runs
    with caplog.at_level("INFO", logger="orchestrator.dispatch.cycle"):
        report = _cycle(budget, django_capture_on_commit_callbacks)
    # then it timed each phase in order, within the cycle's time, and logged them with it
    assert len(report.send) == 1
    assert len(report.generation) == 2
    assert list(report.phases_ms) == list(PHASES)
    assert all(ms >= 0 for ms in report.phases_ms.values())
    assert report.phases_ms["claim"] > 0
    assert sum(report.phases_ms.values()) <= report.duration_ms
    (line,) = [r for r in caplog.records if r.getMessage() == "dispatch cycle"]
    assert {phase: getattr(line, f"{phase}_ms") for phase in PHASES} == report.phases_ms


def test_cycle_persists_cursor_so_every_owner_is_served(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    settings.DISPATCH_MAX_IN_FLIGHT = 1000
    org = make_org()
    owners = [make_owner(organization=org) for _ in range(10)]
    for owner in owners:
        for _ in range(3):
            make_outreach(lead=make_lead(owner=owner))
    served: list[int] = []
    for _ in range(5):  # 5 cycles of 2 slots = 10 picks
        settings.DISPATCH_MAX_IN_FLIGHT = Outreach.objects.filter(state=State.DISPATCHED).count() + 2
        served += [p.owner_id for p in _cycle(budget, django_capture_on_commit_callbacks).picks]
    assert sorted(served) == sorted(o.pk for o in owners)


def test_owner_over_daily_limit_is_deferred_with_reason_and_takes_no_slot(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given an owner in Berlin who already sent its 2 emails today, and another with work
    org = make_org()
    full = make_owner(
        organization=org, daily_limit=2, timezone="Europe/Berlin", hours_start=time(0), hours_end=time(23, 59)
    )
    other = make_owner(organization=org)
    # at a fixed time: "a minute ago" on the real clock is yesterday in Berlin at 23:00 UTC
    now = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
    for _ in range(2):
        make_outreach(lead=make_lead(owner=full), state=State.SENT, sent_at=now - timedelta(minutes=1))
    waiting = make_outreach(lead=make_lead(owner=full), not_before=now - timedelta(hours=1))
    ready = make_outreach(lead=make_lead(owner=other), not_before=now - timedelta(hours=1))
    # when a cycle runs
    report = _cycle(budget, django_capture_on_commit_callbacks, now=now)
    # then the full owner is deferred, never failed, and says why and when it resumes
    assert report.generation == [ready.pk]
    waiting.refresh_from_db()
    assert waiting.state == State.QUEUED
    assert waiting.blocked_reason == "daily limit 2 reached, resumes 00:00 Europe/Berlin"


def test_a_deferred_owner_says_why_on_the_next_rows_of_each_tier_and_a_paused_tier_keeps_its_own(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given an owner outside its hours with replies, intros and nudges queued, its nudges paused
    owner = make_owner(timezone="Asia/Tokyo", hours_start=time(9), hours_end=time(17), working_days="12345")
    Pause.objects.create(owner=owner, tier=int(Tier.NUDGE), reason="nudges paused")
    due = datetime(2026, 1, 1, tzinfo=UTC)
    kinds = (Outreach.Kind.REPLY, Outreach.Kind.INTRO, Outreach.Kind.NUDGE)
    rows = {
        kind: [make_outreach(lead=make_lead(owner=owner), kind=kind, not_before=due) for _ in range(3)]
        for kind in kinds
    }
    # when a cycle runs at 05:00 in Tokyo (one statement writes the reasons: test_cycle_queries)
    _cycle(budget, django_capture_on_commit_callbacks, now=datetime(2026, 3, 4, 20, 0, tzinfo=UTC))

    # then the replies and intros say the hours, the nudges their pause
    def reasons(kind: Outreach.Kind) -> set[str]:
        return set(
            Outreach.objects.filter(id__in=[r.pk for r in rows[kind]]).values_list(
                "blocked_reason", flat=True
            )
        )

    assert (
        reasons(Outreach.Kind.REPLY)
        == reasons(Outreach.Kind.INTRO)
        == {"outside operating hours 09:00-17:00, resumes 09:00 Asia/Tokyo"}
    )
    (nudge_reason,) = reasons(Outreach.Kind.NUDGE)
    assert nudge_reason.endswith("nudges paused")


def test_a_cycle_reads_the_reasons_back_only_when_another_wrote_them_since(
    budget: Budget, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given an owner outside its hours, whose reason a cycle wrote
    from orchestrator.dispatch.cycle.notes import DEFERRED_KEY, DEFERRED_VERSION_KEY

    owner = make_owner(timezone="Asia/Tokyo", hours_start=time(9), hours_end=time(17), working_days="12345")
    make_outreach(lead=make_lead(owner=owner), not_before=datetime(2026, 1, 1, tzinfo=UTC))
    night = datetime(2026, 3, 4, 20, 0, tzinfo=UTC)
    _cycle(budget, django_capture_on_commit_callbacks, now=night)
    reason = redis_client.hget(DEFERRED_KEY, str(owner.pk))
    assert reason is not None
    assert b"outside operating hours" in reason
    # when the map changes behind the cycle's back (its version unchanged), the next cycle
    # takes what it wrote last and does not read the map
    redis_client.hset(DEFERRED_KEY, str(owner.pk), "changed behind its back")
    _cycle(budget, django_capture_on_commit_callbacks, now=night)
    assert redis_client.hget(DEFERRED_KEY, str(owner.pk)) == b"changed behind its back"
    # and when another writer gave it a new version, the cycle reads it, sees the reason
    # differ, and writes its own again
    redis_client.set(DEFERRED_VERSION_KEY, "another dispatcher's")
    _cycle(budget, django_capture_on_commit_callbacks, now=night)
    assert redis_client.hget(DEFERRED_KEY, str(owner.pk)) == reason


def test_a_judged_owners_notes_that_stand_no_more_leave_the_map_and_the_others_stay(
    redis_client: redis.Redis,
) -> None:
    # given two deferred owners, the first with its nudges paused too
    from orchestrator.dispatch.cycle.notes import DEFERRED_KEY, DEFERRED_VERSION_KEY, deferrals_note

    a, b = make_owner(), make_owner()

    def stored() -> dict[bytes | str, bytes | str]:
        return dict(redis_client.hgetall(DEFERRED_KEY))

    deferrals_note(
        client=redis_client,
        deferred={a.pk: "outside hours", b.pk: "limit reached"},
        paused_tiers={a.pk: {Tier.NUDGE: "nudges paused"}},
    )
    assert stored() == {
        b"%d" % a.pk: b"outside hours",
        b"%d:3" % a.pk: b"nudges paused",
        b"%d" % b.pk: b"limit reached",
    }
    # when a cycle that judged only the first finds its nudges resumed, its tier's note goes
    # and the owner not judged keeps its own
    deferrals_note(client=redis_client, deferred={a.pk: "outside hours"}, paused_tiers={}, judged={a.pk})
    assert stored() == {b"%d" % a.pk: b"outside hours", b"%d" % b.pk: b"limit reached"}
    # and when another writer gave the first a tier's note and the map a new version, the next
    # cycle reads the map whole and clears every note of the first that stands no more
    redis_client.hset(DEFERRED_KEY, f"{a.pk}:2", "another writer's")
    redis_client.set(DEFERRED_VERSION_KEY, "another writer's")
    deferrals_note(client=redis_client, deferred={}, paused_tiers={}, judged={a.pk})
    assert stored() == {b"%d" % b.pk: b"limit reached"}


def test_daily_limit_counts_the_owners_local_day_across_dst(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # Berlin springs forward on 2026-03-29: that local day starts 2026-03-28 23:00 UTC.
    owner = make_owner(daily_limit=1, timezone="Europe/Berlin", hours_start=time(0), hours_end=time(23, 59))
    make_outreach(
        lead=make_lead(owner=owner), state=State.SENT, sent_at=datetime(2026, 3, 28, 22, 30, tzinfo=UTC)
    )
    queued = make_outreach(lead=make_lead(owner=owner), not_before=datetime(2026, 3, 1, tzinfo=UTC))
    # 22:30 UTC on the 28th was the previous local day (23:30 CET), so today has room
    report = _cycle(budget, django_capture_on_commit_callbacks, now=datetime(2026, 3, 29, 10, 0, tzinfo=UTC))
    assert report.generation == [queued.pk]


def test_outside_hours_owner_is_deferred(budget: Budget, django_capture_on_commit_callbacks: Any) -> None:
    owner = make_owner(timezone="Asia/Tokyo", hours_start=time(9), hours_end=time(17), working_days="12345")
    queued = make_outreach(lead=make_lead(owner=owner), not_before=datetime(2026, 1, 1, tzinfo=UTC))
    # Wednesday 2026-03-04 20:00 UTC is Thursday 05:00 in Tokyo
    report = _cycle(budget, django_capture_on_commit_callbacks, now=datetime(2026, 3, 4, 20, 0, tzinfo=UTC))
    assert report.generation == []
    queued.refresh_from_db()
    assert queued.blocked_reason == "outside operating hours 09:00-17:00, resumes 09:00 Asia/Tokyo"


def test_approved_drafts_go_to_send_without_llm_budget(
    redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given a budget with no LLM room at all, and an approved draft
    empty = Budget(redis_client=redis_client, limits=Limits(rpm=60, tpm=36_000, burst_ms=60_000))
    while isinstance(empty.reserve(requests=3, tokens=1800), Reservation):
        pass
    approved = make_outreach(state=State.APPROVED, draft_subject="Hi", draft_body="Body text")
    queued = make_outreach()
    # when a cycle runs
    report = _cycle(empty, django_capture_on_commit_callbacks)
    # then the approved draft is routed to send; the LLM work waits for budget
    assert (report.send, report.generation, report.slots) == ([approved.pk], [], 0)
    assert redis_client.llen("send") == 1
    queued.refresh_from_db()
    assert queued.state == State.QUEUED


def test_a_cycle_looks_for_the_approved_drafts_of_the_owners_it_read_some_for_only(
    budget: Budget, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given three owners with intros queued, one of them with two approved drafts too
    org = make_org()
    a, b, c = (make_owner(organization=org) for _ in range(3))
    drafts = [
        make_outreach(lead=make_lead(owner=a), state=State.APPROVED, draft_subject="Hi", draft_body="Body")
        for _ in range(2)
    ]
    for owner in (a, b, c):
        make_outreach(lead=make_lead(owner=owner))
    # when a cycle runs
    with CaptureQueriesContext(connection) as queries:
        report = _cycle(budget, django_capture_on_commit_callbacks)
    # then both drafts went to send, looked for among the drafts of their owner only (one
    # probe): the owners with room and no approved draft were not probed (until 2026-12-07,
    # every owner with room was: 500 probes a cycle at 10,000 owners)
    assert sorted(report.send) == sorted(d.pk for d in drafts)
    reads = [q["sql"] for q in queries.captured_queries if "q.state = 'approved'" in q["sql"]]
    assert len(reads) == 1
    assert f"unnest('{{{a.pk}}}'::bigint[])" in reads[0]


def test_stuck_work_is_recovered_and_its_reservation_refunded(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given an outreach dispatched long ago whose worker vanished, holding a reservation
    settings.DISPATCH_STUCK_AFTER_S = 60
    settings.DISPATCH_MAX_IN_FLIGHT = 1  # so the recovered row is not re-dispatched in the same cycle... yet
    reservation = budget.reserve(requests=3, tokens=1800)
    before = budget.headroom().requests
    stuck = make_outreach(
        state=State.DISPATCHED,
        reservation_id=reservation.id,  # type: ignore[union-attr]
        state_changed_at=timezone.now() - timedelta(minutes=5),
    )
    # when a cycle runs
    report = _cycle(budget, django_capture_on_commit_callbacks)
    # then it was recovered (an attempt recorded) and its budget came back before re-dispatch
    assert report.recovered == 1
    event = OutreachEvent.objects.filter(outreach=stuck, error_class="stuck").get()
    assert (event.from_state, event.to_state) == (State.DISPATCHED, State.QUEUED)
    assert budget.headroom().requests >= before + 3 - 3 * len(report.generation) - 0.5
    stuck.refresh_from_db()
    assert stuck.attempts == 1


@pytest.mark.django_db(transaction=True)
def test_a_claim_that_fails_gives_back_the_reservations_made_for_it(budget: Budget) -> None:
    # given a queued intro, and PostgreSQL refusing the claim: the outreach table is locked
    # against writes and the cycle's connection waits 100 ms for a lock at most
    job = make_outreach(lead=make_lead(owner=make_owner(organization=make_org())))
    with outreach_table_locked("SHARE"), connection.cursor() as cursor:
        cursor.execute("SET lock_timeout = '100ms'")
        try:
            # when a cycle reserves budget for it and then tries to claim it
            with pytest.raises(OperationalError, match="lock timeout"):
                dispatch_cycle(budget=budget)
        finally:
            cursor.execute("RESET lock_timeout")
    # then the row is still queued and the reservation made for it was given back, not left to
    # count as in flight until it expires
    assert Outreach.objects.get(pk=job.pk).state == State.QUEUED
    assert budget.snapshot()["in_flight"] == 0


@pytest.mark.parametrize("days", [-3, 3])
def test_a_cycle_decides_and_stamps_its_claims_on_the_clock_it_is_given(
    days: int, budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a cycle run days away from the wall clock (a replay, a test, a night across midnight),
    # with an intro and an approved draft due a minute before it
    settings.DISPATCH_STUCK_AFTER_S = 600
    now = timezone.now().replace(microsecond=0) + timedelta(days=days)
    due = now - timedelta(minutes=1)
    intro = make_outreach(not_before=due, state_changed_at=due)
    approved = make_draft(state=State.APPROVED, not_before=due, state_changed_at=due)
    # when it runs
    report = _cycle(budget, django_capture_on_commit_callbacks, now=now)
    # then it hands out both, and its claims carry its clock, not the wall clock
    assert (report.generation, report.send) == ([intro.pk], [approved.pk])
    assert set(Outreach.objects.values_list("state_changed_at", flat=True)) == {now}
    # so a cycle past the stuck timeout on that same clock recovers them, and one before it does not
    assert _cycle(budget, django_capture_on_commit_callbacks, now=now + timedelta(seconds=599)).recovered == 0
    assert _cycle(budget, django_capture_on_commit_callbacks, now=now + timedelta(seconds=601)).recovered == 2


def test_the_claimed_rows_go_out_in_the_schedules_order_not_the_tables(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given two owners' intros, then a reply (a later row in the table, first in the schedule)
    a, b = make_owner(), make_owner()
    intros = [make_outreach(lead=make_lead(owner=owner)).pk for owner in (a, b, a, b)]
    reply = make_outreach(lead=make_lead(owner=b), kind=Outreach.Kind.REPLY)
    # when a cycle claims them all
    report = _cycle(budget, django_capture_on_commit_callbacks)
    # then what it claimed (and so enqueued) is in the order it picked: the reply first
    assert set(report.generation) == {reply.pk, *intros}
    assert report.generation == [pick.outreach_id for pick in report.picks]
    assert report.generation[0] == reply.pk


def test_second_dispatcher_skips_while_the_lease_is_held(budget: Budget, redis_client: redis.Redis) -> None:
    make_outreach()
    with dispatch_lease(redis_client, ttl_s=30) as lease:
        assert lease is not None
        assert dispatch_cycle(budget=budget).ran is False
    assert Outreach.objects.get().state == State.QUEUED


@pytest.mark.django_db(transaction=True)
def test_two_dispatchers_racing_claim_disjoint_rows() -> None:
    assert connection.vendor == "postgresql"
    ids = [make_outreach().pk for _ in range(120)]
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    db = connection.settings_dict["NAME"]
    procs = [
        ctx.Process(target=claim_overlapping, args=(db, order, barrier, results))
        for order in (ids, ids[::-1])
    ]
    for p in procs:
        p.start()
    claimed = [results.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert not set(claimed[0]) & set(claimed[1])
    assert sorted(claimed[0] + claimed[1]) == sorted(ids)
    assert OutreachEvent.objects.filter(to_state=State.DISPATCHED).count() == 120


@pytest.mark.django_db(transaction=True)
def test_two_beats_give_one_cycle_at_a_time(redis_client: redis.Redis) -> None:
    owner = make_owner()
    for _ in range(50):
        make_outreach(lead=make_lead(owner=owner))
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    db = connection.settings_dict["NAME"]
    procs = [ctx.Process(target=run_cycles, args=(db, 3.0, results)) for _ in range(2)]
    for p in procs:
        p.start()
    spans = sorted(s for _ in procs for s in results.get(timeout=60))
    for p in procs:
        p.join(30)
    assert len(spans) >= 2
    for (_, end), (next_start, _) in itertools.pairwise(spans):
        assert next_start >= end, "two cycles overlapped"


def _analyzed_history(*, state_of: Callable[[int], State]) -> tuple[Owner, datetime]:
    """One owner's 20,000 intros, row i in `state_of(i)`, and the table analyzed: enough rows that
    a sequential scan would be the planner's choice without a matching partial index."""
    owner = make_owner()
    lead = make_lead(owner=owner)
    now = timezone.now()
    Outreach.objects.bulk_create(
        Outreach(
            lead=lead,
            owner=owner,
            kind="intro",
            tier=Tier.INTRO,
            state=state_of(i),
            not_before=now,
            idempotency_key=f"history:{i}",
            state_changed_at=now,
        )
        for i in range(20_000)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE outreach_outreach")
    return owner, now


def test_selection_queries_use_the_partial_indexes() -> None:
    # given enough rows that a sequential scan would be the planner's choice without the index
    owner, now = _analyzed_history(state_of=lambda i: State.SENT if i % 10 else State.QUEUED)
    from orchestrator.dispatch.reads import explain_selection_queries

    plans = explain_selection_queries(owner_ids=[owner.pk], now=now)
    assert "outreach_ready_by_owner_tier" in plans["ready_candidates"]
    # the loose scan of a tier's owners and the probes of the owners asked about, by the partial
    # index, never by walking an owner's rows through the index on the owner alone: a test
    # before this one may leave the partial indexes' files bloated (its rolled-back rows), and
    # the loose scan's plan walked that index then, until its ORDER BY named the due time too
    plan = plans["ready_owners"]
    assert "outreach_ready_by_tier_owner" in plan, plan
    assert "outreach_outreach_owner_id" not in plan, plan
    assert "Seq Scan" not in plan, plan
    assert "outreach_approved_by_owner" in plans["approved_candidates"]


class _RolledBack(Exception):
    pass


def test_the_loose_scan_keeps_to_its_partial_index_when_the_index_file_is_bloated() -> None:
    # given the ready indexes' files grown by 60,000 queued rows written and rolled back (a bulk
    # assignment that failed leaves them so until a REINDEX: VACUUM never shrinks an index)
    from devtools.bulk import SPREAD, rows_clone

    template = make_outreach(lead=make_lead(owner=make_owner()))
    try:
        with transaction.atomic():
            rows_clone(
                model=Outreach,
                template_id=template.pk,
                rows_sql=SPREAD,
                overrides={"idempotency_key": "'bloat:' || g", "lead_id": "l.id", "owner_id": "l.owner_id"},
                params=[60_000],
            )
            raise _RolledBack
    except _RolledBack:
        pass
    # and one owner's history analyzed on top
    owner, now = _analyzed_history(state_of=lambda i: State.SENT if i % 10 else State.QUEUED)
    from orchestrator.dispatch.reads import explain_selection_queries

    # when the planner plans the ready owners' read, then its loose scan still walks the partial
    # index: with `ORDER BY owner_id` alone, the index's pages per entry made it look dearer than
    # walking the index on the owner, filtering every row of each owner's history
    plan = explain_selection_queries(owner_ids=[owner.pk], now=now)["ready_owners"]
    assert "outreach_ready_by_tier_owner" in plan, plan
    assert "outreach_outreach_owner_id" not in plan, plan


def test_each_owners_first_rows_are_read_in_index_order_when_its_rows_lie_together() -> None:
    # given 300 owners with 100 queued intros each, every owner's rows written together (as a
    # bulk assignment writes them: the table in owner order, so an index on the owner alone
    # looks cheap to the planner), and the table analyzed
    org = make_org()
    owners = make_owners(300, organization=org)
    now = timezone.now()
    leads = [make_lead(owner=owner) for owner in owners]
    Outreach.objects.bulk_create(
        Outreach(
            lead=lead,
            owner_id=lead.owner_id,
            kind="intro",
            tier=Tier.INTRO,
            not_before=now - timedelta(seconds=i),
            idempotency_key=f"together:{lead.pk}:{i}",
            state_changed_at=now,
        )
        for lead in leads
        for i in range(100)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE outreach_outreach")
    from orchestrator.dispatch.reads import explain_selection_queries

    # when the cycle asks for each owner's first two rows, then each owner's are read from the
    # ready index in its order, stopping after two; not all 100 read and sorted (3.9x the time
    # at 10,000 owners and 10^6 rows: bench/dispatch.py, 2026-12-05)
    plans = explain_selection_queries(owner_ids=[o.pk for o in owners], now=now, k=2)
    for name, index in (
        ("ready_candidates", "outreach_ready_by_owner_tier"),
        ("approved_candidates", "outreach_approved_by_owner"),
    ):
        assert index in plans[name], plans[name]
        assert "outreach_outreach_owner_id" not in plans[name], plans[name]


def test_the_leads_suppressed_are_found_among_the_rows_loaded_not_by_reading_every_lead() -> None:
    # given 20,000 leads, none of them suppressed (as in most organizations: opt-outs are few),
    # a queued intro each, and the tables analyzed; and 500 of those rows loaded as candidates
    owner = make_owner()
    template = make_outreach(lead=make_lead(owner=owner))
    rows_clone(
        model=Lead,
        template_id=template.lead_id,
        rows_sql="CROSS JOIN generate_series(1, %s) g WHERE t.id = %s",
        overrides={"email": "'lead' || g || '@many.example'"},
        params=[20_000],
    )
    rows_clone(
        model=Outreach,
        template_id=template.pk,
        rows_sql=SPREAD,
        overrides={"lead_id": "l.id", "idempotency_key": "'many:' || g"},
        params=[20_000],
    )
    loaded = list(Outreach.objects.order_by("id").values_list("id", flat=True))[::40]
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE outreach_lead")
        cursor.execute("ANALYZE outreach_outreach")
    # when the cycle asks which loaded rows' leads may not be emailed any more (admission's rule 8)
    with CaptureQueriesContext(connection) as queries:
        assert reads.suppressed_leads(outreach_ids=loaded) == {}
    (sql,) = [q["sql"] for q in queries.captured_queries]
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    # then PostgreSQL does not read every lead to find the suppressed ones: the leads are the
    # product's whole history, and at 100,000 of them that read was 10 ms of every cycle
    # (bench/dispatch.py, 2026-12-06); the suppressed leads' own index answers instead
    assert "Seq Scan on outreach_lead" not in plan, plan


def test_the_owners_committed_work_is_read_through_the_partial_indexes_not_the_history() -> None:
    # given a history of sent rows and a few rows in flight and in review
    states = [State.DISPATCHED, State.GENERATING, State.SENDING, State.AWAITING_APPROVAL, State.APPROVED]
    owner, now = _analyzed_history(state_of=lambda i: states[i % 5] if i < 10 else State.SENT)
    from orchestrator.dispatch.reads import (
        active_owners,
        committed_today,
        committed_work,
        committed_work_load,
        llm_in_flight,
    )

    # when the cycle reads what each owner has committed, then the plan walks the partial indexes
    # of those states (a scan of the table grows with the history: 89 ms a cycle at 10^6 rows)
    plan = committed_work().explain()
    assert "Seq Scan on outreach_outreach" not in plan, plan
    for index in ("outreach_in_flight_age", "outreach_awaiting_by_owner", "outreach_approved_by_owner"):
        assert index in plan, plan
    # and counts them
    rules = [o.rules for o in active_owners().of([owner.pk])]
    committed = committed_today(owners=rules, now=now)[owner.pk]
    assert (committed.in_flight, committed.drafts) == (6, 4)
    # and, in the same read, the LLM jobs in flight (DISPATCHED and GENERATING without a
    # draft), as reads.llm_in_flight counts them; a send on its way out (a DISPATCHED draft)
    # is no LLM job
    assert committed_work_load().llm_in_flight == llm_in_flight() == 4
    Outreach.objects.filter(owner=owner, state=State.DISPATCHED).update(draft_body="written")
    assert committed_work_load().llm_in_flight == llm_in_flight() == 2


def test_starvation_guard_gives_nudges_a_share_under_reply_load(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given more replies than slots, and a nudge waiting
    settings.DISPATCH_MAX_IN_FLIGHT = 4
    owner = make_owner()
    for _ in range(6):
        make_outreach(lead=make_lead(owner=owner), kind=Outreach.Kind.REPLY)
    nudge = make_outreach(lead=make_lead(owner=owner), kind=Outreach.Kind.NUDGE)
    # when the guard is off, replies take every slot; when on, the nudge gets its share
    assert nudge.pk not in _cycle(budget, django_capture_on_commit_callbacks).generation
    Outreach.objects.filter(state=State.DISPATCHED).update(state=State.SENT)
    settings.DISPATCH_MIN_SHARE = {"nudge": 0.25}
    assert nudge.pk in _cycle(budget, django_capture_on_commit_callbacks).generation


@pytest.mark.parametrize("first_refused", [0, 80], ids=["all-admitted", "first-80-refused"])
def test_a_cycle_judges_a_window_of_owners_and_picks_what_judging_every_owner_picks(
    first_refused: int,
    budget: Budget,
    redis_client: redis.Redis,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 200 owners, a quarter with nothing queued, weighted, a third in an organization with
    # its own LLM cap (a budget group), some with replies, and cycles of 12 slots: a window of
    # 64 owners with work a round;
    # and, in the second case, the first 80 owners the rounds meet refused (paused)
    settings.DISPATCH_MAX_IN_FLIGHT = 12
    capped, free = make_org(llm_rpm=90_000, llm_tpm=90_000_000), make_org()
    owners = [make_owner(organization=capped if i % 3 == 0 else free, weight=1 + i % 3) for i in range(200)]
    for owner in owners[:first_refused]:
        Pause.objects.create(owner=owner, reason="on leave")
    for i, owner in enumerate(owners):
        if i % 4 == 3:
            continue  # nothing queued
        for _ in range(2):
            make_outreach(lead=make_lead(owner=owner))
        if i % 20 == 0:
            make_outreach(lead=make_lead(owner=owner), kind=Outreach.Kind.REPLY)

    from orchestrator.dispatch import reads

    read_whole: dict[Tier, bool] = {}

    def ready_owners(**kwargs: Any) -> Any:  # the real read, noting which tiers it read whole
        found = real_ready_owners(**kwargs)
        read_whole.setdefault(kwargs["tier"], found.complete)
        return found

    real_ready_owners = reads.ready_owners
    monkeypatch.setattr(reads, "ready_owners", ready_owners)
    # when each of four cycles runs over the window, and again from the same cursor judging every owner
    for cycle in range(4):
        read_whole.clear()
        windowed, full = _windowed_and_full(
            budget, redis_client, django_capture_on_commit_callbacks, monkeypatch
        )
        # (the window asked about the intro tier's 150 owners in part, and read the replies' 10 whole)
        assert read_whole == {Tier.REPLY: True, Tier.INTRO: False, Tier.NUDGE: True}
        # then the picks and the cursor are the full cycle's (_windowed_and_full), 12 picks
        assert len(windowed.picks) == 12
        assert (full.judged, windowed.active) == (150, 200)  # every owner with work; all active
        if first_refused and cycle == 0:
            # and a window of refused owners could not fill the slots: the cycle widened it
            assert windowed.windows > 1
        elif first_refused:
            # and the next cycles' first windows were as wide as the picks had to go: one sufficed
            assert windowed.windows == 1
        else:
            # and one window of fewer owners sufficed
            assert (windowed.windows, full.windows) == (1, 1)
            assert windowed.judged < 150


def test_a_window_stops_at_the_first_owner_nobody_asked_about_and_picks_what_judging_every_owner_picks(
    budget: Budget,
    redis_client: redis.Redis,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 1,000 active owners counted by picks, every 12th with two intros (84: more than a
    # window of 64 takes, so the tier is asked about in part: the first 128 owners of the round
    # and the 65 lowest ids with work), the round going on after the 851st owner: the 128 it
    # meets first hold 11 with work, and 2 more with work come after them; those after the
    # 851st weigh 3 (their second intro is due a third of a round later), the rest 1
    settings.DISPATCH_MAX_IN_FLIGHT = 12
    settings.DISPATCH_FAIRNESS = "count"
    org = make_org()
    owners = make_owners(
        1000, organization=org, daily_limit=100, each=lambda i: {"weight": 3 if i > 850 else 1}
    )
    _two_intros_each(owners[::12])
    cursor = Cursor(positions=((Tier.INTRO, Position(owner_id=owners[850].pk)),))
    redis_client.set(CURSOR_KEY, cursor.to_json())
    # when a cycle runs over its window, and again from the same cursor judging every owner
    windowed, _ = _windowed_and_full(budget, redis_client, django_capture_on_commit_callbacks, monkeypatch)
    # then the owners nobody asked about counted as ones with work: the window widened, and the
    # cycle picked the full cycle's 12 (_windowed_and_full), one intro from each of the next
    # 12 owners with work, not a second intro of the 11 the first window found
    assert windowed.windows > 1
    assert len({pick.owner_id for pick in windowed.picks}) == 12


@pytest.mark.parametrize("admitted_every", [1, 2])
def test_the_next_window_holds_as_many_owners_a_slot_as_the_last_cycles_picks_went_through(
    admitted_every: int,
    budget: Budget,
    redis_client: redis.Redis,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 400 owners with two intros each and cycles of 100 slots, counted by picks (each
    # cycle's round goes on from the owner after the last one served); in the second case
    # every second owner on leave (admission refuses it)
    settings.DISPATCH_FAIRNESS = "count"
    # when a dispatcher runs its first cycle, and then its second
    first, second = _first_two_cycles(
        admitted_every, settings, budget, redis_client, django_capture_on_commit_callbacks, monkeypatch
    )
    # then the first judged 2 owners a slot, knowing nothing yet; the second as many a slot as
    # the first's picks went through, and a quarter more: 1.25 where every owner is admitted,
    # 2.49 where every second owner is refused (the first's last pick was its 199th owner);
    # each picked what judging every owner picks
    assert first.judged == 200
    assert second.judged == {1: 125, 2: 249}[admitted_every]
    assert (first.windows, second.windows) == (1, 1)
    assert len(first.picks) == len(second.picks) == 100


def test_a_window_that_had_to_widen_is_as_wide_as_the_picks_needed_the_next_cycle(
    budget: Budget,
    redis_client: redis.Redis,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 400 owners with two intros each, cycles of 100 slots, fairness in tokens (owners
    # never served sit at the front of the round, cycle after cycle), and three of every four
    # owners on leave: the picks must pass 3 refused owners for each one admitted
    # when a dispatcher runs its first two cycles
    first, second = _first_two_cycles(
        4, settings, budget, redis_client, django_capture_on_commit_callbacks, monkeypatch
    )
    # then the first window of 200 owners held 50 it could pick from, so it widened; the next
    # cycle's first window was as wide as the picks went, a quarter more, and sufficed
    assert first.windows == 2
    assert second.windows == 1
    assert len(first.picks) == len(second.picks) == 100


def _first_two_cycles(
    admitted_every: int,
    settings: Any,
    budget: Budget,
    redis_client: redis.Redis,
    captured: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> tuple[Any, Any]:
    """A dispatcher's first two cycles, each also judging every owner from the same cursor
    (_windowed_and_full), over 400 owners with two intros each, cycles of 100 slots, every
    owner on leave but every `admitted_every`th."""
    owners = _four_hundred_owners(settings)
    for i, owner in enumerate(owners):
        if i % admitted_every:
            Pause.objects.create(owner=owner, reason="on leave")
    first, _ = _windowed_and_full(budget, redis_client, captured, monkeypatch)
    second, _ = _windowed_and_full(budget, redis_client, captured, monkeypatch)
    return first, second


def test_a_window_scales_what_the_last_picks_went_through_to_this_cycles_slots() -> None:
    # given a dispatcher that has not picked yet: 2 owners a slot
    assert window.window_size(slot_bound=500) == 1_000
    # given the last cycle's 500 picks went through its rounds' first 500 owners: 1.25 a slot,
    # and proportionally fewer for fewer slots
    window._last.reached, window._last.served = 500, 500
    assert window.window_size(slot_bound=500) == 625
    assert window.window_size(slot_bound=250) == 313
    # given its 5 picks went through 405 owners (400 refused ones at the rounds' front): a
    # cycle of 500 slots takes those 405, and at most 2 a slot beyond them, not 81 a slot
    window._last.reached, window._last.served = 405, 5
    assert window.window_size(slot_bound=500) == 1_744
    # and never fewer than WINDOW_MIN
    window._last.reached, window._last.served = 500, 500
    assert window.window_size(slot_bound=4) == window.WINDOW_MIN


def test_a_windows_margin_is_what_its_last_cycles_needed_beyond_their_windows() -> None:
    # given a dispatcher whose cycles of 100 slots each pick one row from each of a round's
    # owners, but for the last pick, from the owner at place `furthest` (those before it passed
    # over, refused): each cycle learns from the window the last one sized
    owners = list(range(1, 1_001))

    def cycle(furthest: int) -> int:
        size = window.window_size(slot_bound=100)
        picked = [*owners[:99], owners[furthest - 1]]
        window.window_learn(
            window.OwnersWindow(
                loaded=frozenset(owners),
                window=Window(left_out={}),
                complete=True,
                firsts={(Tier.INTRO, ""): owners},
            ),
            [Pick(outreach_id=o, owner_id=o, tier=Tier.INTRO, reason="") for o in picked],
        )
        return size

    # when its first cycles' picks go as far as their slots: the first knows nothing (2 a
    # slot); the next keep a quarter to spare until MARGIN_CYCLES have needed none, then 2%
    sizes = [cycle(100) for _ in range(1 + window.MARGIN_CYCLES + 1)]
    assert sizes == [200] + [125] * window.MARGIN_CYCLES + [102]
    # when owners newly refused make a cycle's picks go 10% further than its window expected
    # (a window of 102 that widened): the next windows keep that 10%, and 2%, over how far
    # the picks went (110)
    assert cycle(110) == 102
    assert [cycle(110) for _ in range(window.MARGIN_CYCLES)] == [124] * window.MARGIN_CYCLES
    # and once MARGIN_CYCLES cycles have needed no more than their windows expected, 2% again
    assert cycle(110) == 113


def test_a_dispatcher_whose_owners_refusals_hold_still_judges_a_window_2_percent_over_its_picks(
    budget: Budget,
    redis_client: redis.Redis,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 400 owners with two intros each and cycles of 100 slots, counted by picks (each
    # round goes on from the owner after the last one served), each cycle's claims put back
    settings.DISPATCH_FAIRNESS = "count"
    owners = _four_hundred_owners(settings)
    # when a dispatcher runs MARGIN_CYCLES + 2 cycles
    judged = []
    for _ in range(window.MARGIN_CYCLES + 2):
        report = _cycle(budget, django_capture_on_commit_callbacks)
        _put_back(budget, report)
        judged.append((report.judged, report.windows, len(report.picks)))
    # then after its first (2 a slot) each judged a quarter more owners than the last one's
    # picks went through until MARGIN_CYCLES had needed no more, then 2% more: 102, one window
    assert judged == [(200, 1, 100)] + [(125, 1, 100)] * window.MARGIN_CYCLES + [(102, 1, 100)]
    # when every fifth owner goes on leave: the window of 102 holds 82 owners it may pick from
    for owner in owners[::5]:
        Pause.objects.create(owner=owner, reason="on leave")
    widened, _ = _windowed_and_full(budget, redis_client, django_capture_on_commit_callbacks, monkeypatch)
    # then that cycle widened, and picked what judging every owner picks (_windowed_and_full)
    assert (widened.windows, len(widened.picks)) == (2, 100)
    # and the next cycle's first window held the picks: as far as they went (125 owners) and
    # as much again as the widened cycle's went past the 100 its window expected (25%), 2%
    # more: 159
    report = _cycle(budget, django_capture_on_commit_callbacks)
    assert (report.judged, report.windows, len(report.picks)) == (159, 1, 100)


def test_a_cycle_does_not_judge_the_owners_with_work_in_flight_outside_its_window(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given 300 owners with two intros queued each, cycles of 20 slots (a window of 64 owners:
    # the first by id), and the last 100 owners each with an email on its way out
    owners = _sending_at_the_back(settings)
    # when a cycle runs
    report = _cycle(budget, django_capture_on_commit_callbacks)
    # then it judged its window only, not the 100 owners for their work in flight (until
    # 2026-12-06 it judged them too: 164 owners), and filled its slots
    assert (report.judged, report.windows, len(report.generation)) == (64, 1, 20)
    assert {Outreach.objects.get(pk=i).owner_id for i in report.generation} <= {o.pk for o in owners[:64]}


@pytest.mark.parametrize("domain_daily", [1_000, 108], ids=["domain-roomy", "domain-binding"])
def test_work_in_flight_outside_the_window_leaves_the_picks_those_of_judging_every_owner(
    domain_daily: int,
    budget: Budget,
    redis_client: redis.Redis,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 300 owners with two intros queued each, the last 100 with an email on its way out
    # (counted on the domain's day, not judged), cycles of 20 slots; in the second case the
    # domain's day (108) leaves room for 8 jobs once those 100 are counted
    _sending_at_the_back(settings)
    budget.send_rules = SendRules(domain_daily=domain_daily)
    # when three cycles run over their windows, each again from the same cursor judging every
    # owner (its in-flight owners among them): then each picked and persisted the same
    # (_windowed_and_full), and the domain's room held
    for _ in range(3):
        windowed, full = _windowed_and_full(
            budget, redis_client, django_capture_on_commit_callbacks, monkeypatch
        )
        assert full.judged == 300
        assert len(windowed.picks) == (20 if domain_daily == 1_000 else 8)


def test_a_domains_day_holds_a_cycle_to_the_room_its_work_in_flight_leaves(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given 300 owners with two intros queued each, cycles of 20 slots, the last 100 owners
    # each with an email on its way out, on a sender domain with 105 emails a day: room for 5
    owners = _sending_at_the_back(settings)
    budget.send_rules = SendRules(domain_daily=105)
    # when a cycle runs
    report = _cycle(budget, django_capture_on_commit_callbacks)
    # then 5 jobs start, not 20 (until 2026-12-06 the picks the shared rooms refused three times
    # over went to owners no room had checked), and the refused rows say the domain's day is reached
    assert len(report.generation) == 5
    waiting = Outreach.objects.filter(state=State.QUEUED, owner__in=owners[:64]).exclude(blocked_reason="")
    assert waiting.exists()
    assert {row.blocked_reason for row in waiting} == {
        "sender domain acme.example: 105/day reached, resumes 00:00 UTC"
    }


CLOSINGS = [
    "llm-cap-binding",
    "over-spend-cap",
    "over-spend-cap-with-llm-cap",
    "paused",
    "domain-paused",
    "domain-paused-for-the-organization",
    "domain-day-reached",
    "mailbox-domain-day-reached",
    "mailbox-deactivated",
    "mailbox-domain-paused",
]


def _closed_organization(closing: str, *, budget: Budget, settings: Any, others: int = 0) -> tuple[Any, str]:
    """300 owners of an organization (sender domain acme.example) with two intros queued
    each, cycles of 20 slots (a window of 64 owners), and `closing`: its own LLM cap (a budget
    group) fitting a few outreach now; nothing of its daily spend cap left (a cap of $0),
    without or with its own LLM cap; paused as a whole; its sender domain paused, for every
    organization or for this one; or its sender domain's day reached (5
    a day, its last 5 owners' first intros on their way out), or that of the domain of the team
    mailbox they all send from (boxes.example); or that team mailbox deactivated (as the
    deliverability guard does) or its domain paused. Then `others` owners of another
    organization and domain with two intros each. Returns the organization and the reason its
    owners' rows should give (none for the LLM cap: their picks are only fewer)."""
    settings.DISPATCH_MAX_IN_FLIGHT = 20
    by_closing: dict[str, dict[str, Any]] = {
        "llm-cap-binding": {"llm_rpm": 12, "llm_tpm": 90_000_000},
        "over-spend-cap": {"daily_spend_cap": Decimal(0)},
        "over-spend-cap-with-llm-cap": {
            "daily_spend_cap": Decimal(0),
            "llm_rpm": 90_000,
            "llm_tpm": 90_000_000,
        },
    }
    org = make_org(sender_email="sales@acme.example", **by_closing.get(closing, {}))
    owners = make_owners(300, organization=org, daily_limit=100)
    _two_intros_each(owners + make_owners(others, organization=make_org(sender_email="hi@other.example")))
    reason = spend_cap_reason(Decimal(0)) if "spend" in closing else ""
    if closing == "paused":
        reason = Pause.objects.create(organization=org, reason="contract renewal").blocked_reason()
    if closing.startswith("domain-paused"):
        of = org if closing.endswith("organization") else None
        pause = Pause.objects.create(organization=of, sender_domain="acme.example", reason="blocklisted")
        reason = pause.blocked_reason()
    if closing.startswith("mailbox"):
        make_mailbox(owners[0], "team@boxes.example", cap=10_000).owners.add(*owners[1:])
    if closing in ("mailbox-deactivated", "mailbox-domain-paused"):
        reason = MAILBOXES_PAUSED
    if closing == "mailbox-deactivated":
        Mailbox.objects.update(active=False, paused_reason="bounce rate 9% over the last 200")
    if closing == "mailbox-domain-paused":
        Pause.objects.create(sender_domain="boxes.example", reason="blocklisted")
    if closing.endswith("domain-day-reached"):
        budget.send_rules = SendRules(domain_daily=5)
        firsts = [
            Outreach.objects.filter(owner=o).order_by("id").values_list("id", flat=True)[0]
            for o in owners[-5:]
        ]
        Outreach.objects.filter(pk__in=firsts).update(
            state=State.SENDING, draft_subject="Hello", draft_body="Hi"
        )
        domain = "boxes.example" if closing.startswith("mailbox") else "acme.example"
        reason = f"sender domain {domain}: 5/day reached, resumes 00:00 UTC"
    return org, reason


@pytest.mark.parametrize("closing", CLOSINGS)
@pytest.mark.parametrize("others", [0, 40], ids=["alone", "others-at-the-back"])
def test_owners_no_admission_could_admit_are_left_outside_the_window_unjudged(
    closing: str,
    others: int,
    budget: Budget,
    redis_client: redis.Redis,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 300 owners of an organization its LLM cap, spend cap, pause or sender domain's day
    # closes (_closed_organization), and in the others' case 40 owners of another after them
    _closed_organization(closing, budget=budget, settings=settings, others=others)
    # when a cycle runs over its window, and again from the same cursor judging every owner
    windowed, full = _windowed_and_full(budget, redis_client, django_capture_on_commit_callbacks, monkeypatch)
    # then both picked the same (_windowed_and_full): the others filled the slots (their own
    # domain's day too is 5), or alone the organization's LLM cap took a few, the others none
    assert full.judged == 300 + others
    if others:
        assert len(windowed.picks) == (5 if closing.endswith("domain-day-reached") else 20)
    elif closing == "llm-cap-binding":
        assert 0 < len(windowed.picks) < 20
    else:
        assert not windowed.picks
    if not others:
        # and, alone, the window did not widen to every owner: whoever judged the owners it left
        # out, none could be picked (until 2026-12-07 it did, every such cycle: at 10,000 owners
        # 589.8 and 594.3 ms instead of 76.8 and 66.8, bench/dispatch.py)
        assert (windowed.judged, windowed.windows) == (64, 1)


@pytest.mark.parametrize("closing", [c for c in CLOSINGS if c != "llm-cap-binding"])
def test_a_closed_organizations_owners_rows_all_say_why_once(
    closing: str, budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given 300 owners of an organization its spend cap, pause or sender domain's day closes
    org, reason = _closed_organization(closing, budget=budget, settings=settings)
    # when a cycle runs over its window
    report = _cycle(budget, django_capture_on_commit_callbacks)
    # then every owner's next row says why they wait, not only those of the 64 owners it judged
    # (their notes would stand until a cycle judged them: all day, over a spend cap or a
    # domain's day); the judged owners' rows all do (up to NOTE_ROWS), the others' first only
    assert (report.judged, report.generation) == (64, [])
    queued = Outreach.objects.filter(owner__organization=org, state=State.QUEUED)
    firsts: dict[int, str] = {}
    for owner_id, said in queued.order_by("owner_id", "not_before", "id").values_list(
        "owner_id", "blocked_reason"
    ):
        firsts.setdefault(owner_id, said)
    assert len(firsts) == 300
    assert set(firsts.values()) == {reason}
    judged = set(queued.values_list("owner_id", flat=True).order_by("owner_id").distinct()[:64])
    assert set(queued.filter(owner_id__in=judged).values_list("blocked_reason", flat=True)) == {reason}
    # and the next cycle writes no reason again
    with CaptureQueriesContext(connection) as queries:
        _cycle(budget, django_capture_on_commit_callbacks)
    assert not [q["sql"] for q in queries.captured_queries if "blocked_reason" in q["sql"]]


def _sending_at_the_back(settings: Any) -> list[Owner]:
    """300 owners of one organization (sender domain acme.example) with two intros queued each,
    the last 100 with one of them on its way out (SENDING); cycles of 20 slots."""
    settings.DISPATCH_MAX_IN_FLIGHT = 20
    owners = make_owners(300, organization=make_org(sender_email="sales@acme.example"), daily_limit=100)
    _two_intros_each(owners)
    firsts = [
        Outreach.objects.filter(owner=owner).order_by("id").values_list("id", flat=True)[0]
        for owner in owners[200:]
    ]
    Outreach.objects.filter(pk__in=firsts).update(state=State.SENDING, draft_subject="Hello", draft_body="Hi")
    return owners


def _four_hundred_owners(settings: Any) -> list[Owner]:
    """400 owners of one organization with two intros each, and cycles of 100 slots."""
    settings.DISPATCH_MAX_IN_FLIGHT = 100
    owners = make_owners(400, organization=make_org(), daily_limit=100)
    _two_intros_each(owners)
    return owners


def _two_intros_each(owners: list[Owner]) -> None:
    for owner in owners:
        for _ in range(2):
            make_outreach(lead=make_lead(owner=owner))


def _put_back(budget: Budget, report: Any) -> None:
    """The cycle's claimed rows back in the queue and their reservations refunded: the next
    cycle starts from the same world."""
    for joined in Outreach.objects.filter(id__in=report.generation).values_list("reservation_id", flat=True):
        for rid in joined.split():
            budget.refund(reservation_id=rid)
    Outreach.objects.filter(id__in=report.generation).update(
        state=State.QUEUED, reservation_id="", llm_route=""
    )


def _windowed_and_full(
    budget: Budget, redis_client: redis.Redis, captured: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, Any]:
    """One cycle over its window, then the same cycle from the same cursor judging every owner:
    asserts both picked and persisted the same. Each cycle's claimed rows go back to the queue
    and their reservations are refunded, so the next starts from the same world; the cursor
    ends where the cycles put it."""

    before = cursor_read(redis_client)
    windowed = _cycle(budget, captured)
    after = cursor_read(redis_client)
    _put_back(budget, windowed)
    redis_client.delete(LEADS_KEY)
    redis_client.set(CURSOR_KEY, before.to_json())  # a cursor's JSON, its leads inline: read as such
    with monkeypatch.context() as patch:
        patch.setattr(window, "WINDOW_MIN", 10**6)
        full = _cycle(budget, captured)
    _put_back(budget, full)
    assert windowed.picks == full.picks
    assert after == cursor_read(redis_client)
    return windowed, full
