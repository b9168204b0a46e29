"""Eight processes race for one bucket on real Redis.

The Lua bucket never admits more than capacity + rate x elapsed. The naive version below, the
read-modify-write that limiters are so often written as (GET, decide in Python, SET), lets
every process spend the same budget and over-admits. Children are spawned: they import this
module, so it imports nothing from Django at the top but the lazy settings object.
"""

from __future__ import annotations

import multiprocessing
import time
import uuid
from typing import Any

import pytest
from django.conf import settings

from orchestrator.budget import Budget, Limits, Reservation, connect
from orchestrator.budget.core import Client
from orchestrator.budget.maths import UNITS

pytestmark = pytest.mark.slow  # spawns its racing processes

PROCESSES = 8
DURATION_S = 2.0
# Strict: 6000 rpm becomes 5806/min (96.8 a second) with a bucket of 193.5 requests.
LIMITS = Limits(rpm=6_000, tpm=6_000_000, burst_ms=2_000)


class NaiveBucket:
    """The race: between this process's read and its write, others read the same level."""

    def __init__(self, client: Client, key: str, *, capacity: int, rate: int):
        self.client, self.key, self.capacity, self.rate = client, key, capacity, rate

    def reserve(self, units: int) -> bool:
        seconds, micros = self.client.time()
        now = seconds * 1000 + micros // 1000
        stored, ts = self.client.hmget(self.key, "r", "ts")
        level = (
            self.capacity
            if ts is None
            else min(self.capacity, int(stored or 0) + (now - int(ts)) * self.rate)
        )
        if level < units:
            return False
        self.client.hset(self.key, mapping={"r": level - units, "ts": now})
        return True


def race(kind: str, url: str, prefix: str, barrier: Any, results: Any) -> None:
    client = connect(url)
    if kind == "lua":
        budget = Budget(redis_client=client, limits=LIMITS, prefix=prefix)

        def reserve() -> bool:
            return isinstance(budget.reserve(requests=1, tokens=1), Reservation)

    else:
        cap_r, _ = LIMITS.capacities()
        naive = NaiveBucket(client, f"{prefix}:naive", capacity=cap_r, rate=LIMITS.rates()[0])

        def reserve() -> bool:
            return naive.reserve(UNITS)

    barrier.wait()
    admitted, deadline = 0, time.monotonic() + DURATION_S
    started = redis_ms(client)  # on Redis's clock, before this process's first reservation
    while time.monotonic() < deadline:
        admitted += reserve()
    results.put((admitted, started, redis_ms(client)))


def redis_ms(client: Client) -> int:
    seconds, micros = client.time()
    return seconds * 1000 + micros // 1000


def run_race(kind: str, url: str) -> tuple[int, float]:
    """Returns (admitted, bound), both in requests."""
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(PROCESSES + 1), ctx.Queue()
    prefix = f"test-race-{uuid.uuid4().hex}"
    client = connect(url)
    procs = [ctx.Process(target=race, args=(kind, url, prefix, barrier, results)) for _ in range(PROCESSES)]
    try:
        for p in procs:
            p.start()
        barrier.wait(timeout=60)
        admitted, starts, ends = zip(*(results.get(timeout=60) for _ in procs), strict=True)
        for p in procs:
            p.join(timeout=30)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        Budget(redis_client=client, limits=LIMITS, prefix=prefix).reset()
        client.delete(f"{prefix}:naive")
        client.close()
    cap_r, _ = LIMITS.capacities()
    # from before the first reservation anyone made to after the last: a bound on the race
    elapsed = max(ends) - min(starts)
    return sum(admitted), (cap_r + LIMITS.rates()[0] * elapsed) / UNITS


@pytest.mark.parametrize("redis_kind", ["single", "cluster"])
def test_eight_processes_never_get_more_than_capacity_plus_refill(redis_kind, request):
    # given a single Redis, or a Redis Cluster (the budget's keys all in one slot)
    url = settings.REDIS_URL if redis_kind == "single" else request.getfixturevalue("redis_cluster").url
    # when 8 processes reserve as fast as they can for 2 s
    admitted, bound = run_race("lua", url)
    # then the total stays within the bound, and close to it (the bucket is really used)
    assert admitted <= bound
    assert admitted >= 0.8 * bound, (admitted, bound)


def test_the_naive_get_then_set_bucket_over_admits():
    admitted, bound = run_race("naive", settings.REDIS_URL)
    assert admitted > bound, f"naive admitted {admitted}, bound {bound:.0f}"
