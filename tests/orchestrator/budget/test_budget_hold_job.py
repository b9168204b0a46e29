"""The buckets' burst holds the costliest job the dispatcher learned (Budget.hold_job), in every
process: the capacity is an argument of each script call, so a worker's budget must agree with
the dispatcher's. Real Redis; two Budget objects stand for two processes."""

from __future__ import annotations

import redis

from orchestrator.budget import Budget, Limits, Reservation
from tests.orchestrator.conftest import FakeClock

LIMITS = Limits(rpm=100_000, tpm=150_000, burst_ms=2_722, margin_ms=1_000, margin_floor_ms=100)


def test_a_held_job_widens_the_bursts_here_and_in_the_other_processes(redis_client: redis.Redis) -> None:
    # given a dispatcher's and a worker's budget, whose buckets hold ~6,800 tokens
    clock = FakeClock()
    dispatcher, worker = (Budget(redis_client=redis_client, limits=LIMITS, clock=clock) for _ in range(2))
    assert dispatcher.largest_tokens() < 12_000
    # when the dispatcher must reserve a 12,000-token job
    dispatcher.hold_job(tokens=12_000)
    # then its bucket takes it whole, and the worker's budget, refreshed, agrees on the capacity
    assert isinstance(dispatcher.reserve(requests=3, tokens=12_000), Reservation)
    worker.job_tokens_refresh()
    assert worker.largest_tokens() == dispatcher.largest_tokens() >= 12_000 + 2 * 2_400
    # and a smaller job held later does not shrink them while the larger one is remembered
    dispatcher.hold_job(tokens=1_800)
    assert dispatcher.largest_tokens() == worker.largest_tokens()


def test_scope_limits_loaded_later_hold_the_job_too(redis_client: redis.Redis) -> None:
    # given a budget asked to hold a 12,000-token job, then given an organization's cap
    budget = Budget(redis_client=redis_client, limits=LIMITS, clock=FakeClock())
    budget.hold_job(tokens=12_000)
    budget.set_scope_limits({"org:*": Limits(rpm=1_000, tpm=100_000, burst_ms=2_722)})
    # then the cap's bucket holds the job as well
    assert budget.largest_tokens(scopes=("provider", "org:7")) >= 12_000
