"""In-flight sizing by Little's law (orchestrator.dispatch.inflight): the pure maths table-driven,
the latency window against real Redis, and a dispatch cycle whose slots follow the target."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from orchestrator.budget import Budget, Headroom, Limits
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.dispatch.inflight import (
    WINDOW_CALLS,
    allowed_rate,
    call_latency_record,
    in_flight_target,
    job_latency,
    latency_observed,
)
from orchestrator.dispatch.owner_tokens import owner_tokens_record
from orchestrator.metrics.in_flight import in_flight_now
from orchestrator.metrics.sql import Quantiles
from outreach.models import Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner


def _headroom(*, rpm: int, tpm: int) -> Headroom:
    return Headroom(
        requests=0, tokens=0, requests_per_min=rpm, tokens_per_min=tpm, limit_rpm=rpm, limit_tpm=tpm
    )


def _steps(p95_s: float, *, count: int = 100) -> dict[str, Quantiles]:
    return {
        step: Quantiles(count=count, p50_s=p95_s / 2, p95_s=p95_s) for step in ("plan", "context", "message")
    }


# 3,000 RPM / 3 calls = 16.67 outreach/s; job = 3 steps x p95 + a 2 s dispatch interval; x 1.2.
@pytest.mark.parametrize(
    ("call_p95_s", "cap", "expected"),
    [
        (0.3, 1000, 58),  # 16.67/s x (0.9 + 2) s x 1.2 = 58
        (3.0, 1000, 220),  # 16.67/s x (9 + 2) s x 1.2 = 220
        (10.0, 1000, 640),  # 16.67/s x (30 + 2) s x 1.2 = 640
        (10.0, 64, 64),  # the old static cap: it would hold a 10 s model to a tenth of the key
        (0.3, 64, 58),
    ],
)
def test_target_scales_with_observed_latency(call_p95_s: float, cap: int, expected: int) -> None:
    # given the budget's rate at 3,000 RPM and each step's observed p95
    rate = allowed_rate(headroom=_headroom(rpm=3000, tpm=10**9), requests_each=3, tokens_each=1800)
    latency = job_latency(steps=_steps(call_p95_s), cold_call_s=5.0, overhead_s=2.0)
    # when the target is sized
    target = in_flight_target(rate_per_s=rate, job_latency_s=latency, headroom=0.2, cap=cap)
    # then it is Little's law with headroom, capped
    assert target == expected


@pytest.mark.parametrize("call_p95_s", [0.3, 3.0, 10.0])
def test_an_uncapped_target_keeps_the_key_busy_at_any_latency(call_p95_s: float) -> None:
    # given a model whose mean call time is at most its p95 (any lognormal with sigma < 3.3)
    rate = allowed_rate(headroom=_headroom(rpm=3000, tpm=10**9), requests_each=3, tokens_each=1800)
    latency = job_latency(steps=_steps(call_p95_s), cold_call_s=5.0, overhead_s=2.0)
    # when the dispatcher keeps the target in flight
    target = in_flight_target(rate_per_s=rate, job_latency_s=latency, headroom=0.2, cap=10**6)
    # then the jobs in flight complete at least at the rate the budget admits (no idle key)
    assert target / latency >= rate


@pytest.mark.parametrize(
    ("rpm", "tpm", "expected_per_s"),
    [
        (3000, 10**9, 3000 / 3 / 60),  # requests bind: 16.67/s
        (3000, 300_000, 300_000 / 1800 / 60),  # tokens bind: 2.78/s
        (0, 0, 0.0),  # budget closed (Redis down, closed policy)
    ],
)
def test_allowed_rate_is_the_tighter_of_requests_and_tokens(
    rpm: int, tpm: int, expected_per_s: float
) -> None:
    rate = allowed_rate(headroom=_headroom(rpm=rpm, tpm=tpm), requests_each=3, tokens_each=1800)
    assert rate == pytest.approx(expected_per_s)


@pytest.mark.parametrize(
    ("steps", "expected_s"),
    [
        ({}, 3 * 5.0 + 2.0),  # cold start: the default per step
        (_steps(3.0, count=4), 3 * 5.0 + 2.0),  # too few calls yet: still the default
        (_steps(3.0, count=5), 3 * 3.0 + 2.0),
        ({"plan": Quantiles(count=50, p50_s=0.5, p95_s=1.0)}, 1.0 + 2 * 5.0 + 2.0),  # one step observed
    ],
)
def test_job_latency_uses_the_cold_default_until_a_step_is_observed(
    steps: dict[str, Quantiles], expected_s: float
) -> None:
    assert job_latency(steps=steps, cold_call_s=5.0, overhead_s=2.0) == pytest.approx(expected_s)


def test_a_blocked_or_empty_budget_still_targets_one() -> None:
    assert in_flight_target(rate_per_s=0.0, job_latency_s=10.0, headroom=0.2, cap=1000) == 1


def test_latency_window_keeps_the_newest_calls_per_step(redis_client: redis.Redis) -> None:
    # given more plan calls than the window holds: old slow ones, then fast ones
    for _ in range(WINDOW_CALLS):
        call_latency_record(step="plan", seconds=9.0)
    for _ in range(WINDOW_CALLS):
        call_latency_record(step="plan", seconds=0.25)
    call_latency_record(step="message", seconds=2.0)
    # when the dispatcher reads the observations
    observed = latency_observed()
    # then only the newest window counts, per step, in seconds
    assert observed["plan"] == Quantiles(count=WINDOW_CALLS, p50_s=0.25, p95_s=0.25)
    assert observed["message"] == Quantiles(count=1, p50_s=2.0, p95_s=2.0)
    assert observed["context"].count == 0
    assert redis_client.llen("orchestrator:llm_latency:plan") == WINDOW_CALLS


@pytest.mark.django_db
@pytest.mark.parametrize(("call_s", "expected_slots"), [(0.3, 6), (3.0, 22), (10.0, 64)])
def test_dispatch_slots_follow_the_target(
    call_s: float,
    expected_slots: int,
    redis_client: redis.Redis,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given a 300 RPM key (1.67 outreach/s), 70 ready intros and calls observed at `call_s`
    settings.DISPATCH_MAX_IN_FLIGHT, settings.DISPATCH_INTERVAL, settings.DISPATCH_IN_FLIGHT_HEADROOM = (
        1000,
        2.0,
        0.2,
    )
    budget = Budget(
        redis_client=redis_client,
        limits=Limits(rpm=300, tpm=10**9, burst_ms=60_000, strict=False, margin_ms=0),
    )
    owners = [make_owner(organization=make_org(), daily_limit=1000) for _ in range(2)]
    for i in range(70):
        make_outreach(lead=make_lead(owner=owners[i % 2]))
    for step in ("plan", "context", "message"):
        for _ in range(10):
            call_latency_record(step=step, seconds=call_s)
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=True):
        report = dispatch_cycle(budget=budget)
    # then it fills the Little's-law target: 1.67/s x (3 x call_s + 2 s) x 1.2
    assert report.slots == expected_slots
    assert Outreach.objects.filter(state=State.DISPATCHED).count() == expected_slots
    # and the next cycle only tops up to the target, whatever is still in flight
    with django_capture_on_commit_callbacks(execute=True):
        assert dispatch_cycle(budget=budget).slots == 0


def test_an_unreachable_redis_never_fails_the_call_and_sizes_cold(settings: Any) -> None:
    # given Redis gone (nobody listens on port 1)
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    # when a worker records a call and the dispatcher reads the window
    call_latency_record(step="plan", seconds=1.0)
    observed = latency_observed()
    # then nothing raised, and every step has no observations (the cold default sizes the cycle)
    assert {step: q.count for step, q in observed.items()} == {
        "triage": 0,
        "plan": 0,
        "context": 0,
        "message": 0,
    }


@pytest.mark.django_db
def test_the_dashboards_rate_counts_calls_at_the_learned_job_cost_as_the_dispatcher_does(
    redis_client: redis.Redis, settings: Any
) -> None:
    # given a key bound by tokens (60,000/min), a configured estimate of 3 x 1,000 tokens a job
    # (20 jobs/min), and the one active owner's jobs learned to count 600 tokens (100 jobs/min)
    settings.LLM_CALLS_PER_OUTREACH, settings.LLM_EST_TOKENS_PER_CALL = 3, 1_000
    budget = Budget(
        redis_client=redis_client,
        limits=Limits(rpm=10**6, tpm=60_000, burst_ms=60_000, strict=False, margin_ms=0),
    )
    owner = make_owner(organization=make_org())
    owner_tokens_record(owner_id=owner.pk, settled=500, counted=600)
    # when the queue-health figure is read
    now = in_flight_now(budget=budget)
    # then its rate is the learned one the dispatcher sizes on, not the configured estimate's
    assert now.rate_per_s == pytest.approx(100 / 60, rel=0.05)
