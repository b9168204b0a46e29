"""Queue-health figures against known database states (orchestrator.metrics)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.utils import timezone

from backoffice.dashboard import dashboard_context
from bench.compare import ArmResult, product_figures
from orchestrator.budget import Budget, Limits
from orchestrator.figures import retry_rate
from orchestrator.metrics.budget_use import budget_last_hour, budget_sample_record
from orchestrator.metrics.depth import DEFERRED_SCAN_LIMIT, deferred_work
from orchestrator.metrics.queue_health import queue_health
from orchestrator.metrics.sql import first_id_since
from orchestrator.models import BudgetSample, DeadLetter
from outreach.models import ErrorClass, Outreach, OutreachEvent, State
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.orchestrator.metrics_helpers import dead_letter_row, event, outreach_at

pytestmark = pytest.mark.django_db

S = State
REPLY, INTRO, NUDGE = Outreach.Kind.REPLY, Outreach.Kind.INTRO, Outreach.Kind.NUDGE


@pytest.fixture
def budget(redis_client: redis.Redis) -> Budget:
    return Budget(redis_client=redis_client, limits=Limits(rpm=300, tpm=300_000, burst_ms=4_000))


def test_every_state_is_counted_and_live_states_per_tier(budget: Budget) -> None:
    # given a known mix of rows
    now = timezone.now()
    make_outreach(kind=INTRO, not_before=now - timedelta(minutes=10))
    make_outreach(kind=INTRO, not_before=now - timedelta(minutes=2))
    make_outreach(kind=NUDGE, not_before=now + timedelta(days=2))  # scheduled: queued, not ready
    make_outreach(kind=REPLY, not_before=now - timedelta(seconds=30))
    make_outreach(kind=INTRO, state=S.DISPATCHED)
    make_outreach(kind=INTRO, state=S.AWAITING_APPROVAL)
    make_outreach(kind=REPLY, state=S.APPROVED)
    make_outreach(kind=INTRO, state=S.SENT)
    make_outreach(kind=INTRO, state=S.SENT)
    make_outreach(kind=NUDGE, state=S.DEAD)
    # when
    depth = queue_health(now=now, budget=budget).depth
    # then every state is present, zeros included
    assert depth.states == {
        "queued": 4,
        "dispatched": 1,
        "generating": 0,
        "awaiting_approval": 1,
        "approved": 1,
        "sending": 0,
        "sent": 2,
        "rejected": 0,
        "cancelled": 0,
        "dead": 1,
    }
    # and the queue per tier, ready rows and the oldest ready row's wait (10 minutes, intro)
    assert depth.tiers["intro"]["queued"] == 2
    assert depth.tiers["nudge"]["queued"] == 1
    assert depth.tiers["reply"] == {**dict.fromkeys(depth.tiers["reply"], 0), "queued": 1, "approved": 1}
    assert "sent" not in depth.tiers["intro"]  # per-tier figures are the queue's
    assert depth.ready_by_tier == {"reply": 1, "intro": 2, "nudge": 0}
    assert depth.oldest_ready_age_s == pytest.approx(600, abs=1)
    assert depth.oldest_ready_age_s_by_tier["reply"] == pytest.approx(30, abs=1)
    assert depth.oldest_ready_age_s_by_tier["nudge"] is None


def test_latency_per_tier_runs_from_due_to_completed_with_percentiles(budget: Budget) -> None:
    # given five autonomous intros sent 10..100 s after creation, a review reply drafted in 40 s,
    # a nudge created days ago but due 60 s before it was sent, and an approved send (excluded)
    now = timezone.now()
    for seconds in (10, 20, 30, 40, 100):
        row = outreach_at(created_at=now - timedelta(minutes=5), kind=INTRO, state=S.SENT)
        event(row, S.SENDING, S.SENT, at=now - timedelta(minutes=5) + timedelta(seconds=seconds))
    review = outreach_at(created_at=now - timedelta(minutes=3), kind=REPLY, state=S.AWAITING_APPROVAL)
    event(review, S.GENERATING, S.AWAITING_APPROVAL, at=now - timedelta(minutes=3) + timedelta(seconds=40))
    nudge = outreach_at(
        created_at=now - timedelta(days=3), kind=NUDGE, state=S.SENT, not_before=now - timedelta(seconds=90)
    )
    event(nudge, S.SENDING, S.SENT, at=now - timedelta(seconds=30))
    approved = outreach_at(created_at=now - timedelta(hours=2), kind=INTRO, state=S.SENT, approved_at=now)
    event(approved, S.SENDING, S.SENT, at=now - timedelta(seconds=5))
    # when
    latency = queue_health(now=now, budget=budget).activity.latency
    # then p50/p95 interpolate as figures.percentile says (PostgreSQL's percentile_cont, or the
    # Python fallback on SQLite): 80% of the way from 40 to 100 s is 88 s
    assert latency["intro"].count == 5
    assert latency["intro"].p50_s == pytest.approx(30, abs=0.01)
    assert latency["intro"].p95_s == pytest.approx(88, abs=0.01)
    assert latency["reply"].count == 1
    assert latency["reply"].p50_s == pytest.approx(40, abs=0.01)
    assert latency["nudge"].p50_s == pytest.approx(60, abs=0.01)


def test_reply_latency_runs_from_the_end_of_the_quiet_period_after_the_last_message(budget: Budget) -> None:
    # given a reply created by a first message 72 s ago, a second message joined 62 s ago, a
    # 60 s quiet period (due 2 s ago: nurture.quiet), and the answer sent now
    now = timezone.now()
    reply = outreach_at(
        created_at=now - timedelta(seconds=72),
        kind=REPLY,
        state=S.SENT,
        not_before=now - timedelta(seconds=2),
    )
    event(reply, S.SENDING, S.SENT, at=now)
    # when
    latency = queue_health(now=now, budget=budget).activity.latency
    # then its latency is the 2 s since it fell due: not the quiet period, nor the lead's burst
    assert latency["reply"].count == 1
    assert latency["reply"].p50_s == pytest.approx(2, abs=0.01)


def test_compare_bench_and_dashboard_read_the_same_retries_and_reply_latency(budget: Budget) -> None:
    # given a run: replies sent 2 s and 6 s after they fell due, an intro that needed one
    # transient retry, and waits for budget that are not retries (our pacer, a provider 429)
    now = timezone.now()
    for seconds in (2, 6):
        reply = outreach_at(created_at=now - timedelta(minutes=10), kind=REPLY, state=S.SENT)
        event(reply, S.SENDING, S.SENT, at=now - timedelta(minutes=10) + timedelta(seconds=seconds))
    intro = outreach_at(created_at=now - timedelta(minutes=9), kind=INTRO, state=S.SENT)
    event(intro, S.GENERATING, S.QUEUED, at=now - timedelta(minutes=8), error_class="")  # paced
    event(intro, S.GENERATING, S.QUEUED, at=now - timedelta(minutes=7), error_class=ErrorClass.RATE_LIMITED)
    event(intro, S.GENERATING, S.QUEUED, at=now - timedelta(minutes=6), error_class=ErrorClass.TRANSIENT)
    event(intro, S.SENDING, S.SENT, at=now - timedelta(minutes=5))
    # when the published benchmark's figure function and the dashboard read the same rows
    bench = product_figures(since=now - timedelta(hours=1))
    health = queue_health(now=now, budget=budget)
    arm = ArmResult(name="product", retries=bench.retries, completed=bench.completed)
    # then they agree, and a wait for budget is not a retry
    assert (bench.retries, bench.completed) == (health.activity.retries, health.activity.completed) == (1, 3)
    assert arm.retries_per_completed == health.retry_rate == retry_rate(retries=1, completed=3)
    assert bench.reply == health.activity.latency["reply"]
    assert (bench.reply.count, bench.reply.p50_s) == (2, pytest.approx(4.0, abs=0.01))
    assert ("reply", 2, "4 s", "6 s") in dashboard_context(health=health)["latency_rows"]


def test_window_counts_retries_429s_outcomes_and_ignores_older_events(budget: Budget, settings: Any) -> None:
    # given events from two days ago (outside the 24 h window), then recent ones
    now = timezone.now()
    old = outreach_at(created_at=now - timedelta(days=3), kind=INTRO, state=S.DEAD)
    event(old, S.GENERATING, S.QUEUED, at=now - timedelta(days=2), error_class=ErrorClass.TRANSIENT)
    event(old, S.GENERATING, S.DEAD, at=now - timedelta(days=2), error_class=ErrorClass.PERMANENT)
    ok = outreach_at(
        created_at=now - timedelta(hours=1),
        kind=INTRO,
        state=S.SENT,
        tokens_used=1200,
        llm_calls=3,
        llm_cost=Decimal("0.6"),  # what it cost at LLM_PRICES when it was written
    )
    event(ok, S.GENERATING, S.QUEUED, at=now - timedelta(minutes=50), error_class=ErrorClass.RATE_LIMITED)
    event(ok, S.GENERATING, S.QUEUED, at=now - timedelta(minutes=40), error_class=ErrorClass.TRANSIENT)
    event(ok, S.GENERATING, S.DISPATCHED, at=now - timedelta(minutes=30))
    event(ok, S.SENDING, S.SENT, at=now - timedelta(minutes=29))
    review = outreach_at(
        created_at=now - timedelta(hours=1),
        kind=REPLY,
        state=S.AWAITING_APPROVAL,
        tokens_used=800,
        llm_calls=4,
        llm_cost=Decimal("0.4"),
    )
    event(review, S.GENERATING, S.AWAITING_APPROVAL, at=now - timedelta(minutes=20))
    dead = outreach_at(created_at=now - timedelta(hours=1), kind=INTRO, state=S.DEAD)
    event(dead, S.GENERATING, S.DEAD, at=now - timedelta(minutes=10), error_class=ErrorClass.POLICY)
    # when
    health = queue_health(now=now, budget=budget)
    a = health.activity
    # then only the window's events count
    assert (a.completed, a.sent, a.dead, a.retries, a.provider_429s) == (2, 1, 1, 1, 1)
    assert (a.generated, a.llm_requests, a.tokens) == (2, 7, 2000)
    assert health.retry_rate == pytest.approx(0.5)
    assert health.dead_letter_rate == pytest.approx(1 / 3)
    assert health.tokens_per_completed == pytest.approx(1000)
    assert health.cost_per_completed == pytest.approx(0.5)
    assert a.success_by_kind["intro"].completed == 1
    assert a.success_by_kind["intro"].rate == pytest.approx(0.5)
    assert a.success_by_kind["reply"].rate == pytest.approx(1.0)
    assert a.success_by_kind["nudge"].rate is None


def test_approval_rate_and_time_to_approval(budget: Budget) -> None:
    # given drafts approved after 60 s and 180 s, and one rejected
    now = timezone.now()
    for wait_s in (60, 180):
        row = outreach_at(created_at=now - timedelta(hours=1), state=S.APPROVED)
        entered = now - timedelta(minutes=30)
        event(row, S.GENERATING, S.AWAITING_APPROVAL, at=entered)
        event(row, S.AWAITING_APPROVAL, S.APPROVED, at=entered + timedelta(seconds=wait_s))
    rejected = outreach_at(created_at=now - timedelta(hours=1), state=S.REJECTED)
    event(rejected, S.GENERATING, S.AWAITING_APPROVAL, at=now - timedelta(minutes=10))
    event(rejected, S.AWAITING_APPROVAL, S.REJECTED, at=now - timedelta(minutes=5))
    # when
    health = queue_health(now=now, budget=budget)
    # then
    assert (health.activity.approved, health.activity.rejected) == (2, 1)
    assert health.approval_rate == pytest.approx(2 / 3)
    assert health.activity.time_to_approval.count == 2
    assert health.activity.time_to_approval.p50_s == pytest.approx(120, abs=0.01)
    assert health.activity.time_to_approval.p95_s == pytest.approx(174, abs=0.01)


def test_owner_share_counts_sent_and_dispatched_per_owner_including_idle_owners(budget: Budget) -> None:
    # given owner a: 2 sent in the last hour and 1 earlier today; b: 1 dispatched; c: nothing
    now = timezone.now()
    org = make_org()
    a, b, _idle = (make_owner(organization=org, name=n) for n in ("a", "b", "c"))
    for minutes in (300, 20, 10):
        row = make_outreach(lead=make_lead(owner=a), state=S.SENT)
        event(row, S.SENDING, S.SENT, at=now - timedelta(minutes=minutes))
    event(make_outreach(lead=make_lead(owner=b), state=S.DISPATCHED), S.QUEUED, S.DISPATCHED, at=now)
    # when
    owners = {o.name: o for o in queue_health(now=now, budget=budget).owners}
    # then
    assert (owners["a"].sent_1h, owners["a"].sent_24h, owners["a"].share_sent_24h) == (2, 3, 1.0)
    assert (owners["b"].dispatched_1h, owners["b"].dispatched_24h, owners["b"].sent_24h) == (1, 1, 0)
    assert (owners["c"].sent_24h, owners["c"].dispatched_24h) == (0, 0)


def test_dead_letter_classes_with_newest_open_samples(budget: Budget) -> None:
    # given four open policy failures, one cancelled, and one exhausted
    letters = [
        dead_letter_row(make_outreach(state=S.DEAD), failure_class=ErrorClass.POLICY, reason=f"policy {i}")
        for i in range(4)
    ]
    dead_letter_row(
        make_outreach(state=S.CANCELLED),
        failure_class=ErrorClass.POLICY,
        reason="closed",
        status=DeadLetter.Status.CANCELLED,
    )
    dead_letter_row(
        make_outreach(state=S.DEAD), failure_class=ErrorClass.EXHAUSTED, reason="smtp down " * 100
    )
    # when
    health = queue_health(budget=budget)
    # then
    classes = {f.failure_class: f for f in health.failures}
    assert health.dead_letters == 6
    assert (classes["policy"].open, classes["policy"].total) == (4, 5)
    assert [s.dead_letter_id for s in classes["policy"].samples] == [d.pk for d in letters[::-1][:3]]
    sample = classes["policy"].samples[0]
    assert (sample.outreach_id, sample.lead_id, sample.reason) == (
        letters[3].outreach_id,
        letters[3].lead_id_ref,
        "policy 3",
    )
    assert len(classes["exhausted"].samples[0].reason) == 300


def test_deferred_work_is_grouped_by_reason() -> None:
    owner = make_owner()
    for _ in range(3):
        make_outreach(lead=make_lead(owner=owner), blocked_reason="daily limit 50 reached, resumes 09:00 UTC")
    make_outreach(blocked_reason="outside hours, resumes 09:00 Europe/Berlin")
    make_outreach()  # not labelled
    make_outreach(state=S.SENT, blocked_reason="stale label on a finished row")
    deferred = deferred_work()
    assert [(r.reason[:11], r.rows, r.owners) for r in deferred.reasons] == [
        ("daily limit", 3, 1),
        ("outside hou", 1, 1),
    ]
    assert (deferred.rows, deferred.truncated) == (4, False)
    assert DEFERRED_SCAN_LIMIT >= 50 * 100  # 100 deferred owners' labelled heads fit exactly


def test_window_start_is_found_on_the_primary_key() -> None:
    now = timezone.now()
    row = make_outreach()
    old = event(row, S.QUEUED, S.DISPATCHED, at=now - timedelta(days=2))
    event(row, S.DISPATCHED, S.QUEUED, at=now - timedelta(hours=1))
    assert first_id_since(model=OutreachEvent, column="at", since=now - timedelta(days=1)) == old.pk
    assert first_id_since(model=OutreachEvent, column="at", since=now - timedelta(days=5)) == 0


def test_budget_sample_is_recorded_once_a_minute_with_limit_and_effective_rate(budget: Budget) -> None:
    # given 25 provider calls in the window (the full 300/min rate) and a 429 that cut the limit
    now = timezone.now()
    for _ in range(25):
        budget.acquire_call(tokens=100)
    budget.report_429(retry_after_s=0)
    # when the dispatcher calls the hook three times in one minute, then once in the next
    first = budget_sample_record(budget=budget, now=now.replace(second=5))
    again = budget_sample_record(budget=budget, now=now.replace(second=50))
    later = budget_sample_record(budget=budget, now=now.replace(second=5) + timedelta(minutes=1))
    # then one sample per minute, with use, configured limit and the adapted (lower) limit
    assert first is not None
    assert again is None
    assert later is not None
    assert BudgetSample.objects.count() == 2
    assert (first.requests, first.tokens, first.limit_rpm, first.limit_tpm) == (25, 2_500, 300, 300_000)
    assert first.effective_rpm < first.limit_rpm
    assert first.at == now.replace(second=0, microsecond=0)
    points = budget_last_hour(now=now + timedelta(minutes=2))
    assert [p.at for p in points] == [first.at, later.at]


def test_budget_samples_past_retention_are_dropped(budget: Budget, settings: Any) -> None:
    settings.BUDGET_SAMPLE_RETENTION_DAYS = 1
    now = timezone.now()
    assert budget_sample_record(budget=budget, now=now - timedelta(days=3)) is not None
    assert budget_sample_record(budget=budget, now=now) is not None
    assert BudgetSample.objects.count() == 1


def test_budget_figures_say_when_redis_is_unreachable() -> None:
    down = Budget(
        redis_client=redis.Redis(port=1, socket_connect_timeout=0.2),
        limits=Limits(rpm=300, tpm=300_000, burst_ms=4_000),
    )
    health = queue_health(budget=down)
    assert (health.budget.redis, health.budget.limit_rpm, health.budget.effective_rpm) == (
        "unavailable",
        300,
        None,
    )
    assert budget_sample_record(budget=down) is None
