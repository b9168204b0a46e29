"""The pacer's margin, measured: real Redis with a fake clock, then a real provider over HTTP.

The margin widens the pacer's window past the provider's 60 s to cover the spread of the delay
from logging a call to its arrival (docs/budget.md). Each answer's report is one sample: its
admission to the report, less the provider's processing time. The margin is 2 x the highest
of the recent samples plus a floor, at most the configured cap, and the cap until measured.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from devtools.llm_sim import LLMSim
from nurture.writing import llm
from orchestrator.budget import Budget, Limits, ProviderReport, ScriptCall, Spread
from orchestrator.budget.maths import WINDOW_MS
from tests.orchestrator.conftest import START_MS, FakeClock


@pytest.fixture
def budget_defaults() -> dict[str, Any]:
    return {"limits": Limits(rpm=10, tpm=100_000, strict=False)}


def answer(budget: Budget, clock: FakeClock, *, round_trip_ms: int, processing_ms: int | None) -> None:
    """One call admitted now and answered `round_trip_ms` later."""
    slot = budget.acquire_call(tokens=10)
    assert slot.wait_ms == 0
    clock.now += round_trip_ms
    budget.report_provider(
        remaining_requests=None, remaining_tokens=None, sent_at_ms=slot.at_ms, processing_ms=processing_ms
    )


def margin(budget: Budget) -> int:
    return int(budget.snapshot()["scopes"]["provider"]["margin_ms"])


def test_the_margin_is_the_cap_until_enough_answers_were_measured(make_budget):
    clock = FakeClock()
    budget = make_budget(
        limits=Limits(rpm=1_000, tpm=10**6, strict=False), clock=clock, spread=Spread(min_samples=5)
    )
    for _ in range(4):
        answer(budget, clock, round_trip_ms=400, processing_ms=390)
    assert margin(budget) == 1_000
    answer(budget, clock, round_trip_ms=400, processing_ms=390)
    assert margin(budget) == 2 * 10 + 100  # twice the spread seen, plus the floor


def test_the_margin_is_the_highest_recent_spread_plus_the_floor_and_the_pacer_uses_it(make_budget):
    clock = FakeClock()
    budget = make_budget(
        limits=Limits(rpm=10, tpm=100_000, strict=False), clock=clock, spread=Spread(min_samples=3)
    )
    # given answers 300 ms after admission, of which the provider spent 280, 270 and 290 ms
    for processing in (280, 270, 290):
        answer(budget, clock, round_trip_ms=300, processing_ms=processing)
    # then the margin is 2 x the widest spread (30 ms) plus the 100 ms floor
    assert margin(budget) == 160
    # and the pacer's window is 60 s + 160 ms: the 11th call in it waits for the first to age out
    first = START_MS
    for _ in range(7):
        assert budget.acquire_call(tokens=10).wait_ms == 0
    slot = budget.acquire_call(tokens=10)
    assert clock.now + slot.wait_ms == first + WINDOW_MS + 160
    # and the dispatcher's bucket refills at what that pacer passes: 10 * 60 / 60.160 s
    assert budget.headroom().requests_per_min == 10 * WINDOW_MS // (WINDOW_MS + 160)


def test_without_the_providers_processing_time_the_round_trip_bounds_the_spread(make_budget):
    clock = FakeClock()
    budget = make_budget(clock=clock, spread=Spread(min_samples=2))
    answer(budget, clock, round_trip_ms=300, processing_ms=None)
    answer(budget, clock, round_trip_ms=420, processing_ms=None)
    assert margin(budget) == 2 * 420 + 100


def test_the_margin_never_exceeds_its_cap(make_budget):
    # given a real LLM's multi-second answers and no processing time: the bound is useless
    clock = FakeClock()
    budget = make_budget(
        limits=Limits(rpm=10, tpm=100_000, strict=False, margin_ms=700),
        clock=clock,
        spread=Spread(min_samples=1),
    )
    answer(budget, clock, round_trip_ms=8_000, processing_ms=None)
    # then the margin stays at the cap (LLM_BUDGET_MARGIN_MS): never worse than a fixed one
    assert margin(budget) == 700


def test_a_floor_at_the_cap_fixes_the_margin(make_budget):
    clock = FakeClock()
    budget = make_budget(
        limits=Limits(rpm=10, tpm=100_000, strict=False, margin_ms=1_000, margin_floor_ms=1_000),
        clock=clock,
        spread=Spread(min_samples=1),
    )
    answer(budget, clock, round_trip_ms=300, processing_ms=299)
    assert margin(budget) == 1_000


def test_an_old_outlier_leaves_the_window_of_samples(make_budget):
    clock = FakeClock()
    budget = make_budget(
        limits=Limits(rpm=1_000, tpm=10**6, strict=False),
        clock=clock,
        spread=Spread(samples=4, min_samples=1),
    )
    answer(budget, clock, round_trip_ms=900, processing_ms=300)  # a call held up 600 ms
    assert margin(budget) == 1_000  # 2 x 600 + 100, capped
    for _ in range(4):
        answer(budget, clock, round_trip_ms=310, processing_ms=300)
    assert margin(budget) == 2 * 10 + 100


def test_a_report_sent_with_the_jobs_next_call_samples_the_spread_at_the_answer(make_budget):
    # given a call answered 300 ms after admission, of which the provider spent 250 ms
    clock = FakeClock()
    budget = make_budget(
        limits=Limits(rpm=1_000, tpm=10**6, strict=False), clock=clock, spread=Spread(min_samples=1)
    )
    slot = budget.acquire_call(tokens=10)
    clock.now += 300
    # when its report rides with the job's next call, 800 ms after the answer
    clock.now += 800
    report = ProviderReport(
        remaining_requests=None,
        remaining_tokens=None,
        sent_at_ms=slot.at_ms,
        processing_ms=250,
        answered_s=time.monotonic() - 0.8,
    )
    assert budget.acquire_call(tokens=10, also=[budget.report_call(report)]).wait_ms == 0
    # then the sample is the 50 ms of transit, not 850 (less the few ms this test took since
    # `answered_s`, which the report also counts as late): 2 x 50 + 100, never the cap's 1,000
    assert 150 - 2 * 25 <= margin(budget) <= 200
    assert budget.snapshot()["scopes"]["provider"]["calls_in_window"] == 2


def test_a_report_that_fails_never_stops_the_call_it_rides_with(make_budget):
    # given a report Redis cannot run (a sent-at that is not a number: the script errors)
    clock = FakeClock()
    budget = make_budget(clock=clock)
    good = budget.report_call(ProviderReport(remaining_requests=5, remaining_tokens=None))
    broken = ScriptCall("REPORT", good.keys, [good.args[0], "not a time", *good.args[2:]])
    # when the next call carries it
    slot = budget.acquire_call(tokens=10, also=[broken])
    # then the call is granted and logged all the same
    assert slot.wait_ms == 0
    assert budget.snapshot()["scopes"]["provider"]["calls_in_window"] == 1


# --- against a real provider over HTTP ------------------------------------------------------------


def test_the_spread_measured_against_llm_sim_is_the_calls_delay_not_its_latency(make_budget, settings):
    # given llm_sim answering after exactly 1 s and saying so (openai-processing-ms), and a cap
    # far above what counting that latency would give (2 x 1,000 + 100 ms)
    sim = LLMSim(rpm=10_000, tpm=10_000_000, latency_median_ms=1000, latency_sigma=0)
    sim.start()
    settings.LLM_BASE_URL, settings.LLM_API_KEY, settings.LLM_TIMEOUT_S = sim.base_url, "sk-test", 10.0
    budget = make_budget(
        limits=Limits(rpm=10_000, tpm=10_000_000, strict=False, margin_ms=10_000),
        spread=Spread(min_samples=20),
    )
    round_trips: list[int] = []
    # the SDK client is built on the first call (hundreds of ms): a real spread, but a one-off
    llm.chat(messages=[{"role": "user", "content": "warm up"}], max_tokens=5)

    def worker() -> None:  # the worker's path: pace, call, report (nurture.writing.generation._call)
        for _ in range(5):
            slot = budget.acquire_call(tokens=100)
            result = llm.chat(messages=[{"role": "user", "content": "hello"}], max_tokens=50)
            budget.report_provider(
                remaining_requests=result.rate_limits.remaining_requests,
                remaining_tokens=result.rate_limits.remaining_tokens,
                sent_at_ms=slot.at_ms,
                processing_ms=result.processing_ms,
            )
            round_trips.append(int(budget.snapshot()["now_ms"]) - slot.at_ms)

    try:
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        sim.stop()
    # when 20 calls were answered, each after at least the provider's 1 s
    assert len(round_trips) == 20
    assert min(round_trips) >= 1_000
    # then the margin is what lies between our log and the provider's clock (HTTP, threads,
    # Redis: tens of ms, on a loaded machine hundreds) x 2, plus the floor; counting the latency
    # would have made it at least 2 x 1,000 + 100
    assert 100 <= margin(budget) < 2 * 1_000 + 100, margin(budget)
