"""Budget maths, and the Lua buckets checked step by step against a pure-Python model.

The model below is the reference: integer levels in 1/60000 units, continuous refill capped
at capacity, all-or-none consumption across requests and tokens. A hypothesis state machine
drives the real Lua (with a fake clock passed as the `now` override) and the model side by
side, and checks the budget's promises on what Redis actually answered.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    MultipleResults,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
)

from orchestrator.budget import Budget, Denied, Draw, Limits, Reservation, connect, maths
from orchestrator.budget.maths import UNITS

ROOT = Path(__file__).resolve().parents[3]

# --- the maths, table-driven ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limit", "burst_ms", "strict", "rate", "bound"),
    [
        (300, 2_000, True, 290, 290 * 62_000 / 60_000),  # 96.7% of 300: the design's 2 s cycle
        (300, 600, True, 297, 297 * 60_600 / 60_000),  # b = 1% of L: 99%
        (300, 2_000, False, 295, 295 * 62_000 / 60_000),  # paced (1 s margin): acquire_call trims it
        (300_000, 2_000, True, 290_322, 290_322 * 62_000 / 60_000),
    ],
)
def test_strict_bucket_never_exceeds_the_window_limit(limit, burst_ms, strict, rate, bound):
    # given a limit and a burst / when the bucket is sized / then r*60 + b is the window bound
    assert maths.bucket_rate(limit=limit, burst_ms=burst_ms, strict=strict, margin_ms=1_000) == rate
    assert maths.window_bound(
        limit=limit, burst_ms=burst_ms, strict=strict, margin_ms=1_000
    ) == pytest.approx(bound)
    if strict:
        assert bound <= limit


@given(limit=st.integers(1, 10_000_000), burst_ms=st.integers(1, 60_000))
def test_strict_window_bound_holds_for_any_limit(limit, burst_ms):
    assert maths.window_bound(limit=limit, burst_ms=burst_ms, strict=True) <= limit


@pytest.mark.parametrize(
    ("limit", "amount", "strict", "expected"),
    [(300, 3, True, 2_628), (300, 3, False, 2_611), (60, 3, True, 5_273), (300_000, 1_800, False, 2_367)],
)
def test_burst_holds_a_cycle_of_refill_plus_one_reservation(limit, amount, strict, expected):
    # given a dispatcher drawing whole reservations every 2 s / when the burst is sized
    burst = maths.burst_for_cycle(
        limit=limit, amount=amount, interval_ms=2_000, strict=strict, margin_ms=1_000
    )
    # then the smallest bucket that never overflows between cycles is chosen
    assert burst == expected
    rate = maths.bucket_rate(limit=limit, burst_ms=burst, strict=strict, margin_ms=1_000)
    assert rate * burst >= rate * 2_000 + amount * UNITS


@given(limit=st.integers(2, 1_000_000), amount=st.integers(1, 50), interval_ms=st.integers(100, 10_000))
def test_burst_for_cycle_never_overflows_and_keeps_strict_windows(limit, amount, interval_ms):
    try:
        burst = maths.burst_for_cycle(limit=limit, amount=amount, interval_ms=interval_ms, strict=True)
    except ValueError:
        return  # the amount can never fit under this limit: refused, not mis-sized
    rate = maths.bucket_rate(limit=limit, burst_ms=burst, strict=True)
    assert rate * burst >= rate * interval_ms + amount * UNITS
    assert maths.window_bound(limit=limit, burst_ms=burst, strict=True) <= limit


def test_burst_that_can_never_hold_the_amount_is_refused():
    with pytest.raises(ValueError, match="cannot fit"):
        maths.burst_for_cycle(limit=2, amount=3, interval_ms=1, strict=True)


@pytest.mark.parametrize(
    ("base", "cut_ms", "now_ms", "expected"),
    [(None, 0, 99_000, 300), (150, 0, 4_999, 150), (150, 0, 5_000, 156), (150, 0, 500_000, 300)],
)
def test_adapted_limit_recovers_one_step_per_interval(base, cut_ms, now_ms, expected):
    got = maths.adapted_limit(
        configured=300, base=base, cut_ms=cut_ms, now_ms=now_ms, step=6, interval_ms=5_000
    )
    assert got == expected


@pytest.mark.slow
def test_limits_defaults_are_the_settings_defaults() -> None:
    # given the settings read with no LLM_BUDGET_* variable in the environment
    script = (
        "from django.conf import settings; print(settings.LLM_BUDGET_STRICT, settings.LLM_BUDGET_MARGIN_MS)"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LLM_BUDGET_")}
    done = subprocess.run(
        [sys.executable, "-c", f"import django; django.setup(); {script}"],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    # when Limits is built with its own defaults
    limits = Limits(rpm=300, tpm=300_000)
    # then it has the bucket shape the product runs with by default (paced, the same margin)
    assert done.stdout.split() == [str(limits.strict), str(limits.margin_ms)]


# --- the reference model ----------------------------------------------------------------------


@dataclass
class ModelBucket:
    cap: tuple[int, int]
    rate: tuple[int, int]
    level: list[int]
    ts: int
    wasted: list[int] = field(default_factory=lambda: [0, 0])

    def refill(self, now: int) -> None:
        for i in (0, 1):
            full = self.level[i] + max(0, now - self.ts) * self.rate[i]
            self.wasted[i] += max(0, full - self.cap[i])
            self.level[i] = min(self.cap[i], full)
        self.ts = max(self.ts, now)


@dataclass
class ModelReservation:
    requests: int
    tokens: int
    expires: int
    open: bool = True


class Model:
    def __init__(self, limits: Limits, ttl_ms: int, now: int):
        cap = limits.capacities()
        self.bucket = ModelBucket(cap=cap, rate=limits.rates(), level=list(cap), ts=now)
        self.start, self.ttl_ms = now, ttl_ms
        self.reservations: dict[str, ModelReservation] = {}
        self.consumed = [0, 0]  # net: granted - given back + charged

    def reserve(self, *, count: int, requests: int, tokens: int, now: int) -> tuple[int, int, str]:
        b = self.bucket
        b.refill(now)
        need = (requests * UNITS, tokens * UNITS)
        grant = count
        for i in (0, 1):
            if need[i]:
                grant = min(grant, b.level[i] // need[i])
        grant = max(0, grant)
        wait, kind = 0, ""
        if grant < count:
            for i, name in ((0, "requests"), (1, "tokens")):
                w = maths.wait_ms(deficit=(grant + 1) * need[i] - b.level[i], rate=b.rate[i])
                if w > wait:
                    wait, kind = w, name
        for i in (0, 1):
            b.level[i] -= grant * need[i]
            self.consumed[i] += grant * need[i]
        return grant, wait, kind

    def add(self, rid: str, *, requests: int, tokens: int, now: int) -> None:
        self.reservations[rid] = ModelReservation(requests, tokens, now + self.ttl_ms)

    def give_back(self, rid: str, *, back_r: int, back_t: int | None, now: int) -> bool:
        res = self.reservations.get(rid)
        if res is None or not res.open:
            return False
        res.open = False
        if res.expires <= now:
            return False
        b = self.bucket
        b.refill(now)
        for i, back in ((0, back_r), (1, res.tokens if back_t is None else back_t)):
            full = b.level[i] + back * UNITS
            b.wasted[i] += max(0, full - b.cap[i])
            b.level[i] = min(b.cap[i], full)
            self.consumed[i] -= back * UNITS
        return True

    def outstanding(self, now: int) -> tuple[int, int, int]:
        live = [r for r in self.reservations.values() if r.open and r.expires > now]
        return sum(r.requests for r in live), sum(r.tokens for r in live), len(live)


# --- the state machine ------------------------------------------------------------------------

TTL_MS = 5_000


class BudgetMachine(RuleBasedStateMachine):
    reservations = Bundle("reservations")

    def __init__(self) -> None:
        super().__init__()
        self.now = 1_700_000_000_000
        self.client = connect(settings.REDIS_URL)
        self.events: list[tuple[int, int, int]] = []  # (ms, net requests units, net tokens units)

    @initialize(
        rpm=st.integers(6, 600),
        tpm=st.integers(1_000, 200_000),
        burst_ms=st.integers(500, 20_000),
        strict=st.booleans(),
    )
    def setup(self, rpm: int, tpm: int, burst_ms: int, strict: bool) -> None:
        burst_ms = max(  # at least one request and one token must fit
            maths.burst_for_cycle(limit=rpm, amount=1, interval_ms=burst_ms, strict=strict, margin_ms=1_000),
            maths.burst_for_cycle(limit=tpm, amount=1, interval_ms=burst_ms, strict=strict, margin_ms=1_000),
        )
        self.limits = Limits(rpm=rpm, tpm=tpm, burst_ms=burst_ms, strict=strict, margin_ms=1_000)
        self.budget = Budget(
            redis_client=self.client,
            limits=self.limits,
            prefix=f"test-model-{uuid.uuid4().hex}",
            reservation_ttl_ms=TTL_MS,
            clock=lambda: self.now,
        )
        self.model = Model(self.limits, TTL_MS, self.now)
        self.max_r, self.max_t = (cap // UNITS for cap in self.limits.capacities())

    def teardown(self) -> None:
        if hasattr(self, "budget"):
            self.budget.reset()
        self.client.close()

    @rule(ms=st.integers(0, 3_000))
    def tick(self, ms: int) -> None:
        self.now += ms

    @rule(target=reservations, data=st.data(), count=st.integers(1, 4))
    def reserve(self, data: st.DataObject, count: int) -> MultipleResults[tuple[str, int]]:
        requests = data.draw(st.integers(0, self.max_r), label="requests")
        tokens = data.draw(st.integers(0 if requests else 1, self.max_t), label="tokens")
        # when the budget and the model reserve the same thing at the same time
        if count == 1:
            result = self.budget.reserve(requests=requests, tokens=tokens)
            granted = [result] if isinstance(result, Reservation) else []
            denied = result if isinstance(result, Denied) else None
        else:
            granted = self.budget.reserve_many(count=count, requests_each=requests, tokens_each=tokens)
            denied = None
        grant, wait, kind = self.model.reserve(count=count, requests=requests, tokens=tokens, now=self.now)
        # then they agree on how many, and on how long to wait for the next one
        event("reserve: all granted" if grant == count else "reserve: some or all denied")
        assert len(granted) == grant
        if denied is not None:
            assert (denied.wait_ms, denied.bucket) == (wait, f"provider:{kind}")
        for res in granted:
            assert res.expires_at_ms == self.now + TTL_MS
            self.model.add(res.id, requests=requests, tokens=tokens, now=self.now)
        self.events.append((self.now, grant * requests * UNITS, grant * tokens * UNITS))
        return multiple(*[(res.id, res.tokens) for res in granted])

    @rule(reservation=reservations, data=st.data())
    def settle(self, reservation: tuple[str, int], data: st.DataObject) -> None:
        rid, tokens = reservation
        actual = data.draw(st.integers(0, 2 * tokens + 10), label="actual_tokens")
        res = self.model.reservations[rid]
        ok = self.budget.settle(reservation_id=rid, actual_tokens=actual)
        event(f"settle: {'done' if ok else 'expired or already closed'}")
        assert ok == self.model.give_back(rid, back_r=0, back_t=tokens - actual, now=self.now)
        if ok:  # only unused estimate counts against "admitted"; an excess is a charge
            self.events.append((self.now, 0, -max(0, tokens - actual) * UNITS))
        assert not self.budget.settle(reservation_id=rid, actual_tokens=actual), "settled twice"
        assert not res.open

    @rule(reservation=consumes(reservations))
    def refund(self, reservation: tuple[str, int]) -> None:
        rid, _ = reservation
        res = self.model.reservations[rid]
        ok = self.budget.refund(reservation_id=rid)
        assert ok == self.model.give_back(rid, back_r=res.requests, back_t=None, now=self.now)
        if ok:
            self.events.append((self.now, -res.requests * UNITS, -res.tokens * UNITS))
        assert not self.budget.refund(reservation_id=rid), "refunded twice"

    @invariant()
    def levels_match_the_model(self) -> None:
        if not hasattr(self, "budget"):
            return
        room = self.budget.headroom()
        model = self.model.bucket
        model.refill(self.now)
        assert (room.requests, room.tokens) == (model.level[0] / UNITS, model.level[1] / UNITS)

    @invariant()
    def budget_is_conserved(self) -> None:
        # every unit is in the bucket, held by work, or was lost to a full bucket: none is created
        if not hasattr(self, "budget"):
            return
        b, elapsed = self.model.bucket, self.now - self.model.start
        b.refill(self.now)
        for i in (0, 1):
            assert b.level[i] + self.model.consumed[i] + b.wasted[i] == b.cap[i] + b.rate[i] * elapsed

    @invariant()
    def never_admits_more_than_capacity_plus_refill(self) -> None:
        # on what Redis answered: in any window, net admitted <= capacity + rate * window
        if not hasattr(self, "budget"):
            return
        caps, rates = self.limits.capacities(), self.limits.rates()
        for i, (t0, *_) in enumerate(self.events):
            net = [0, 0]
            for t1, dr, dt in self.events[i:]:
                net[0] += dr
                net[1] += dt
                for k in (0, 1):
                    assert net[k] <= caps[k] + rates[k] * (t1 - t0)

    @invariant()
    def outstanding_matches(self) -> None:
        if not hasattr(self, "budget"):
            return
        snap = self.budget.snapshot()
        got = (snap["outstanding_requests"], snap["outstanding_tokens"], snap["in_flight"])
        assert got == self.model.outstanding(self.now)


TestBudgetMatchesModel = BudgetMachine.TestCase
TestBudgetMatchesModel.settings = hsettings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)


# --- many scopes in one call: the walk --------------------------------------------------------

SETS = (("a",), ("b",), ("a", "c"), ("b", "c"))


def model_walk(
    buckets: dict[str, ModelBucket], jobs: list[list[Draw]], now: int
) -> list[list[int] | tuple[str, int]]:
    """`Budget.reserve_jobs` by hand: in order, a job takes every draw or none; a scope that
    cannot fit one refuses every later job drawing from it; the others go on."""
    for b in buckets.values():
        b.refill(now)
    refused: dict[str, tuple[str, int]] = {}  # scope -> (kind, wait) of its refusal
    outcomes: list[list[int] | tuple[str, int]] = []
    for job in jobs:
        need: dict[str, list[int]] = {}
        for draw in job:
            for scope in draw.scopes:
                n = need.setdefault(scope, [0, 0])
                n[0] += draw.requests * UNITS
                n[1] += draw.tokens * UNITS
        earlier = next((s for d in job for s in d.scopes if s in refused), None)
        if earlier is not None:
            outcomes.append((f"{earlier}:{refused[earlier][0]}", refused[earlier][1]))
            continue
        short = [s for s, n in need.items() if any(n[i] > buckets[s].level[i] for i in (0, 1) if n[i])]
        if not short:
            for s, n in need.items():
                for i in (0, 1):
                    buckets[s].level[i] -= n[i]
            outcomes.append([draw.tokens for draw in job])
            continue
        worst: tuple[str, int] | None = None
        for s in short:
            b, n = buckets[s], need[s]
            waits = [maths.wait_ms(deficit=n[i] - b.level[i], rate=b.rate[i]) for i in (0, 1)]
            kind = "tokens" if waits[1] > waits[0] else "requests"
            refused[s] = (kind, max(waits))
            if worst is None or max(waits) > worst[1]:
                worst = (f"{s}:{kind}", max(waits))
        assert worst is not None
        outcomes.append(worst)
    return outcomes


@st.composite
def jobs_in_sets(draw: st.DrawFn, caps: dict[str, tuple[int, int]]) -> list[list[Draw]]:
    jobs = []
    for _ in range(draw(st.integers(1, 12))):
        sets = draw(st.lists(st.sampled_from(SETS), min_size=1, max_size=2, unique=True))
        job = []
        for scopes in sets:
            most_r = min(caps[s][0] for s in scopes) // UNITS // len(sets)
            most_t = min(caps[s][1] for s in scopes) // UNITS // len(sets)
            requests = draw(st.integers(0, min(3, most_r)))
            job.append(Draw(scopes, requests, draw(st.integers(0 if requests else 1, most_t))))
        jobs.append(job)
    return jobs


@given(data=st.data(), tpms=st.lists(st.integers(2_000, 60_000), min_size=3, max_size=3))
@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_jobs_over_many_scopes_are_reserved_as_the_walk_says(data: st.DataObject, tpms: list[int]) -> None:
    """Rounds of `reserve_jobs` over three scopes and four sets of them, with time passing
    between: every outcome, wait and bucket level as the pure walk says."""
    limits = {
        s: Limits(rpm=60, tpm=tpm, burst_ms=4_000, strict=True) for s, tpm in zip("abc", tpms, strict=True)
    }
    now = 1_700_000_000_000
    client = connect(settings.REDIS_URL)
    budget = Budget(
        redis_client=client,
        limits=Limits(rpm=60, tpm=60_000),
        scope_limits=limits,
        prefix=f"test-walk-{uuid.uuid4().hex}",
        clock=lambda: now,
    )
    buckets = {
        s: ModelBucket(cap=lim.capacities(), rate=lim.rates(), level=list(lim.capacities()), ts=now)
        for s, lim in limits.items()
    }
    caps = {s: lim.capacities() for s, lim in limits.items()}
    try:
        for _ in range(data.draw(st.integers(1, 4), label="rounds")):
            now += data.draw(st.integers(0, 3_000), label="ms")
            jobs = data.draw(jobs_in_sets(caps), label="jobs")
            got = [
                [r.tokens for r in outcome]
                if isinstance(outcome, list)
                else (outcome.bucket, outcome.wait_ms)
                for outcome in budget.reserve_jobs(jobs)
            ]
            expected = model_walk(buckets, jobs, now)
            event("some refused" if any(isinstance(o, tuple) for o in expected) else "all granted")
            assert got == expected
            for s, b in buckets.items():
                room = budget.headroom(scopes=(s,))
                assert (room.requests, room.tokens) == (b.level[0] / UNITS, b.level[1] / UNITS)
    finally:
        budget.reset()
        client.close()
