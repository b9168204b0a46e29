"""The budget's behaviours on real Redis, with a fake clock passed to the Lua as its `now`."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from redis.crc import key_slot

from devtools.processes import free_port
from orchestrator.budget import (
    Adaptive,
    Budget,
    CircuitBreaker,
    Denied,
    Draw,
    Headroom,
    Limits,
    Reservation,
    budget_from_settings,
    connect,
    reservation_scopes,
)
from orchestrator.budget.core import Client
from orchestrator.budget.maths import WINDOW_MS
from tests.orchestrator.conftest import START_MS, FakeClock


@pytest.fixture
def budget_defaults(clock: FakeClock) -> dict[str, Any]:
    # strict: the expected figures below are worked out with the strict refill (L * 60 / 62)
    return {"limits": Limits(rpm=300, tpm=300_000, strict=True), "clock": clock}


def granted(result: Reservation | Denied) -> Reservation:
    assert isinstance(result, Reservation), result
    return result


# --- reservations -----------------------------------------------------------------------------


def test_reserve_takes_from_every_scope_or_from_none(make_budget):
    # given an organisation whose own bucket holds one reservation
    budget = make_budget(scope_limits={"org:*": Limits(rpm=60, tpm=60_000, burst_ms=4_000, strict=True)})
    scopes = ("provider", "org:7")
    granted(budget.reserve(requests=3, tokens=1_800, scopes=scopes))
    before = budget.headroom()
    # when a second reservation needs both buckets
    result = budget.reserve(requests=3, tokens=1_800, scopes=scopes)
    # then the organisation says no, and the provider bucket is untouched
    assert isinstance(result, Denied)
    assert result.bucket == "org:7:requests"
    assert budget.headroom() == before
    assert budget.headroom(scopes=scopes).requests == pytest.approx(
        56 * 4_000 / 60_000 - 3
    )  # 60 * 60 / 64 = 56.25 rpm


def test_the_rooms_of_several_scopes_are_read_in_one_round_trip_each_as_if_read_alone(client, clock):
    """A dispatch cycle reads the room of every capped organization it judges (hundreds on a
    platform: bench/dispatch.py --organizations): one script call, not one each."""

    class Counting(Budget):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.calls: list[tuple[str, int]] = []

        def run(self, name: str, keys: Any, args: Any, **kwargs: Any) -> Any:
            self.calls.append((name, len(keys) // 2))  # the script, and the scopes it read
            return super().run(name, keys, args, **kwargs)

    # given two organizations' buckets, one of them partly spent
    budget = Counting(
        redis_client=client,
        prefix=f"test-{uuid.uuid4().hex}",
        limits=Limits(rpm=300, tpm=300_000, strict=True),
        scope_limits={"org:*": Limits(rpm=60, tpm=60_000, burst_ms=4_000, strict=True)},
        clock=clock,
    )
    try:
        granted(budget.reserve(requests=2, tokens=1_000, scopes=("provider", "org:7")))
        sets = [("provider", "org:7"), ("provider", "org:8"), ("provider",)]
        budget.calls.clear()
        # when their rooms are read together
        together = budget.headrooms(sets)
        # then in one call of the script, reading the three sets' five scopes
        assert budget.calls == [("HEADROOM", 5)]
        # and each room is what reading it alone says
        assert together == [budget.headroom(scopes=scopes) for scopes in sets]
        assert together[0].requests < together[1].requests  # the spent one is the smaller
        assert budget.headrooms([]) == []
    finally:
        budget.reset()


def test_settle_gives_back_the_unused_estimate_once(make_budget):
    budget = make_budget()
    full = budget.headroom()
    res = granted(budget.reserve(requests=3, tokens=1_800))
    # when the work used 500 of the 1800 tokens reserved
    assert budget.settle(reservation_id=res.id, actual_tokens=500) is True
    # then 1300 come back, the requests stay spent, and a second settle changes nothing
    assert budget.headroom().tokens == pytest.approx(full.tokens - 500)
    assert budget.headroom().requests == pytest.approx(full.requests - 3)
    assert budget.settle(reservation_id=res.id, actual_tokens=0) is False
    assert budget.refund(reservation_id=res.id) is False
    assert budget.headroom().tokens == pytest.approx(full.tokens - 500)


def test_settle_charges_tokens_used_beyond_the_estimate(make_budget):
    budget = make_budget()
    full = budget.headroom()
    res = granted(budget.reserve(requests=3, tokens=1_800))
    assert budget.settle(reservation_id=res.id, actual_tokens=2_500, actual_requests=2)
    assert budget.headroom().tokens == pytest.approx(full.tokens - 2_500)
    assert budget.headroom().requests == pytest.approx(full.requests - 2)


def test_refund_gives_everything_back_once(make_budget):
    budget = make_budget()
    full = budget.headroom()
    res = granted(budget.reserve(requests=3, tokens=1_800))
    assert budget.refund(reservation_id=res.id) is True
    assert budget.headroom() == full
    assert budget.refund(reservation_id=res.id) is False
    assert budget.settle(reservation_id=res.id, actual_tokens=0) is False
    assert budget.headroom() == full


def test_an_expired_reservation_stays_spent_and_cannot_be_settled(make_budget, clock):
    # given a reservation never settled, and a bucket that refills slowly
    budget = make_budget(
        limits=Limits(rpm=6, tpm=6_000, burst_ms=40_000, strict=False), reservation_ttl_ms=1_000
    )
    res = granted(budget.reserve(requests=3, tokens=1_000))
    assert budget.snapshot()["in_flight"] == 1
    # when its TTL passes
    clock.now += 1_000
    spent = budget.headroom()
    # then a late refund is a no-op: nothing is given back twice, and it is no longer in flight
    assert budget.refund(reservation_id=res.id) is False
    assert budget.headroom() == spent
    snap = budget.snapshot()
    assert (snap["in_flight"], snap["outstanding_requests"], snap["outstanding_tokens"]) == (0, 0, 0)


def test_reserve_many_grants_what_fits_in_one_round_trip(make_budget):
    budget = make_budget()  # strict 300 rpm, 2 s burst: 9.67 requests
    reservations = budget.reserve_many(count=10, requests_each=3, tokens_each=1_800)
    assert len(reservations) == 3
    assert len({r.id for r in reservations}) == 3
    assert budget.headroom().fits(requests_each=3, tokens_each=1_800) == 0
    assert all(budget.refund(reservation_id=r.id) for r in reservations)
    assert budget.headroom().fits(requests_each=3, tokens_each=1_800) == 3


def test_jobs_of_different_sizes_are_reserved_in_order_in_one_round_trip_as_far_as_they_fit(make_budget):
    budget = make_budget()  # strict 300,000 tpm, 2 s burst: 9,677 tokens
    # when four jobs of their own sizes ask, in order: 4,000 + 3,000 + 2,000 fit, the 1,000 after not
    reservations, denied = budget.reserve_in_order(requests_each=1, tokens=[4_000, 3_000, 2_000, 1_000])
    # then the first three hold their own sizes, and the tokens bucket says why the fourth waits
    assert [r.tokens for r in reservations] == [4_000, 3_000, 2_000]
    assert denied is not None
    assert denied.bucket == "provider:tokens"
    assert denied.wait_ms > 0
    # and each gives back its own size: the 3,000 one's refund makes room for a 3,000 job
    assert budget.headroom().fits(requests_each=1, tokens_each=3_000) == 0
    assert budget.refund(reservation_id=reservations[1].id)
    assert budget.headroom().fits(requests_each=1, tokens_each=3_000) == 1


def test_a_smaller_job_later_in_the_order_does_not_take_the_room_a_larger_one_waits_for(make_budget):
    budget = make_budget()
    reservations, denied = budget.reserve_in_order(requests_each=1, tokens=[4_000, 6_000, 100])
    assert [r.tokens for r in reservations] == [4_000]
    assert denied is not None


def test_jobs_of_interleaved_organizations_are_reserved_in_one_call_a_refusing_cap_stopping_only_its_own(
    make_budget,
):
    """A cycle's picks interleave organizations and deployments: one call reserves them all, in
    order, as the runs of one scope set did one call each."""
    budget = make_budget(
        scope_limits={
            "dep:a": Limits(rpm=6_000, tpm=6_000_000, strict=True),
            "dep:b": Limits(rpm=300, tpm=300_000, strict=True),  # 9,677 tokens
            "org:7": Limits(rpm=300, tpm=300_000, strict=True),
            "org:8": Limits(rpm=6_000, tpm=6_000_000, strict=True),
        }
    )
    a7, a8, b8 = ("dep:a", "org:7"), ("dep:a", "org:8"), ("dep:b", "org:8")
    jobs = [
        [Draw(a7, 1, 6_000)],
        [Draw(a8, 1, 1_000), Draw(b8, 1, 4_000)],  # a job calling both deployments
        [Draw(a7, 1, 6_000)],  # org:7 has 3,677 left: refused
        [Draw(a8, 1, 1_000), Draw(b8, 1, 6_000)],  # dep:b has 5,677 left: refused, dep:a untouched
        [Draw(a7, 1, 100)],  # would fit org:7, but a costlier org:7 job waits first
        [Draw(a8, 1, 2_000)],  # org:8 fits, dep:a fits: granted though dep:b refused
        [Draw(a8, 1, 100), Draw(b8, 1, 100)],  # dep:b waits for the earlier job
    ]
    before = budget.headroom(scopes=("dep:a",)).tokens
    # when they are reserved in one call
    outcomes = budget.reserve_jobs(jobs)
    # then each job has a reservation per draw, its own size, or what refused it
    assert [[r.tokens for r in o] if isinstance(o, list) else o.bucket for o in outcomes] == [
        [6_000],
        [1_000, 4_000],
        "org:7:tokens",
        "dep:b:tokens",
        "org:7:tokens",
        [2_000],
        "dep:b:tokens",
    ]
    assert all(o.wait_ms > 0 for o in outcomes if isinstance(o, Denied))
    # and only the granted drew: 9,000 from dep:a, 4,000 from dep:b, 6,000 from org:7
    assert budget.headroom(scopes=("dep:a",)).tokens == before - 9_000
    assert budget.headroom(scopes=("dep:b",)).tokens == pytest.approx(9_677.4 - 4_000, abs=1)
    assert budget.headroom(scopes=("org:7",)).tokens == pytest.approx(9_677.4 - 6_000, abs=1)
    # and each reservation names its own scopes, so it settles and refunds on its own
    second = outcomes[1]
    assert isinstance(second, list)
    assert [reservation_scopes(r.id) for r in second] == [a8, b8]
    assert budget.refund(reservation_id=second[1].id)
    assert budget.headroom(scopes=("dep:b",)).tokens == pytest.approx(9_677.4, abs=1)


def test_a_job_drawing_twice_from_one_set_of_scopes_is_refused_up_front(make_budget):
    budget = make_budget()
    with pytest.raises(ValueError, match="once from each set of scopes"):
        budget.reserve_jobs([[Draw(("provider",), 1, 10), Draw(("provider",), 1, 10)]])
    with pytest.raises(ValueError, match="at least once"):
        budget.reserve_jobs([[]])


def test_denied_says_exactly_how_long_to_wait(make_budget, clock):
    budget = make_budget()
    budget.reserve_many(count=3, requests_each=3, tokens_each=1_800)
    denied = budget.reserve(requests=3, tokens=1_800)
    assert isinstance(denied, Denied)
    assert denied.bucket == "provider:requests"
    # 0.67 requests left, 3 needed, 290 units/ms: ceil(140000 / 290) ms
    assert denied.wait_ms == 483
    clock.now += denied.wait_ms - 1
    assert isinstance(budget.reserve(requests=3, tokens=1_800), Denied)
    clock.now += 1
    granted(budget.reserve(requests=3, tokens=1_800))


def test_a_reservation_that_can_never_fit_is_refused_up_front(make_budget):
    budget = make_budget()
    with pytest.raises(ValueError, match="raise their burst_ms"):
        budget.reserve(requests=10, tokens=1)
    with pytest.raises(ValueError, match="no limits configured"):
        budget.reserve(requests=1, tokens=1, scopes=("org:1",))
    with pytest.raises(ValueError, match="bad scope"):
        budget.reserve(requests=1, tokens=1, scopes=("a@b",))


def test_settle_of_a_foreign_or_malformed_id_is_false(make_budget):
    budget = make_budget()
    assert budget.settle(reservation_id="nothing-here", actual_tokens=1) is False
    assert budget.refund(reservation_id="abc.1@provider") is False


def test_headroom_counts_whole_reservations():
    room = Headroom(
        requests=10.5, tokens=4_000.0, requests_per_min=0, tokens_per_min=0, limit_rpm=0, limit_tpm=0
    )
    assert room.fits(requests_each=3, tokens_each=1_800) == 2
    assert room.fits(requests_each=3, tokens_each=0) == 3
    blocked = Headroom(10.0, 4_000.0, 0, 0, 0, 0, blocked_ms=5)
    assert blocked.fits(requests_each=1, tokens_each=1) == 0


# --- call-time pacing -------------------------------------------------------------------------


def test_acquire_call_admits_the_window_limit_then_waits_for_the_oldest(make_budget, clock):
    budget = make_budget(limits=Limits(rpm=10, tpm=100_000, margin_ms=1_000))
    first = clock.now
    for _ in range(10):
        assert budget.acquire_call(tokens=100).wait_ms == 0
        clock.now += 1_000
    slot = budget.acquire_call(tokens=100)
    assert slot.bucket == "provider:requests"
    assert clock.now + slot.wait_ms == first + WINDOW_MS + 1_000  # the window plus the margin
    clock.now += slot.wait_ms
    assert budget.acquire_call(tokens=100).at_ms == clock.now


def test_acquire_call_waits_until_enough_tokens_leave_the_window(make_budget, clock):
    budget = make_budget(limits=Limits(rpm=100, tpm=1_000, margin_ms=0))
    times = []
    for tokens in (100, 200, 300, 400):  # 1000 in all
        times.append(clock.now)
        assert budget.acquire_call(tokens=tokens).wait_ms == 0
        clock.now += 10
    # a call of 450 needs the first three (600 tokens) to leave
    slot = budget.acquire_call(tokens=450)
    assert slot.bucket == "provider:tokens"
    assert clock.now + slot.wait_ms == times[2] + WINDOW_MS


@given(calls=st.lists(st.tuples(st.integers(0, 4_000), st.integers(0, 400)), min_size=1, max_size=60))
@hsettings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_paced_calls_never_exceed_the_limit_in_any_window_and_waits_are_exact(client, calls):
    clock = FakeClock()
    budget = Budget(
        redis_client=client,
        limits=Limits(rpm=7, tpm=1_000, margin_ms=0),
        prefix=f"test-pace-{uuid.uuid4().hex}",
        clock=clock,
    )
    logged: list[tuple[int, int]] = []
    try:
        for gap, tokens in calls:
            clock.now += gap
            slot = budget.acquire_call(tokens=tokens)
            if slot.wait_ms:
                # the wait is exact: one ms earlier is still too early, then it goes through
                clock.now += slot.wait_ms - 1
                assert budget.acquire_call(tokens=tokens).wait_ms == 1
                clock.now += 1
                slot = budget.acquire_call(tokens=tokens)
            assert slot.wait_ms == 0
            logged.append((clock.now, tokens))
    finally:
        budget.reset()
    for start, _ in logged:
        window = [tok for at, tok in logged if start <= at < start + WINDOW_MS]
        assert len(window) <= 7
        assert sum(window) <= 1_000


# --- adaptation -------------------------------------------------------------------------------


def _send_at_the_limit(budget: Budget, *, interval_ms: int = 5_000) -> None:
    """Our calls of the last interval at the full rate (300/min: 25 in 5 s): busy when a 429 comes."""
    for _ in range(300 * interval_ms // WINDOW_MS):
        assert budget.acquire_call(tokens=10).wait_ms == 0


def test_a_429_halves_the_limits_once_per_interval_and_holds_calls(make_budget, clock):
    budget = make_budget(adaptive=Adaptive(interval_ms=5_000))
    _send_at_the_limit(budget)
    budget.report_429(retry_after_s=2)
    budget.report_429(retry_after_s=2)  # a volley from calls already in flight: one signal
    room = budget.headroom()
    assert (room.limit_rpm, room.limit_tpm, room.blocked_ms) == (150, 150_000, 2_000)
    assert room.requests_per_min == 150 * 60_000 // 62_000  # the dispatcher sees it at once
    assert isinstance(budget.reserve(requests=1, tokens=1), Denied)
    assert budget.acquire_call(tokens=1).bucket == "provider:retry_after"
    clock.now += 2_000
    assert budget.acquire_call(tokens=1).wait_ms == 0
    clock.now += 3_000
    _send_at_the_limit(budget)
    budget.report_429(retry_after_s=0)
    assert budget.headroom().limit_rpm == (150 + 6) // 2  # recovered one step, then halved


def test_a_429_while_we_send_little_holds_calls_but_keeps_the_limits(make_budget, clock):
    # given a provider outage: the first 429 came while we were busy and cut the limits once
    budget = make_budget(adaptive=Adaptive(interval_ms=5_000))
    _send_at_the_limit(budget)
    budget.report_429(retry_after_s=2)
    # when the outage goes on and our held-back workers only probe, one call per Retry-After
    for _ in range(12):
        clock.now += 5_000
        budget.acquire_call(tokens=10)
        budget.report_429(retry_after_s=2)
    # then each 429 holds calls, but the limit is not halved again and again down to the floor
    room = budget.headroom()
    assert room.blocked_ms == 2_000
    assert room.limit_rpm == 150 + 12 * 6  # one cut, then the additive climb went on
    assert budget.snapshot()["scopes"]["provider"]["last_429_ms"] == clock.now


def test_a_429_for_tokens_cuts_when_our_tokens_ran_near_the_limit(make_budget, clock):
    # few calls, but each large: the token rate was at the limit
    budget = make_budget(adaptive=Adaptive(interval_ms=5_000))
    for _ in range(5):
        assert budget.acquire_call(tokens=5_000).wait_ms == 0  # 25k tokens in 5 s = 300k/min
    budget.report_429(retry_after_s=1)
    assert budget.headroom().limit_tpm == 150_000


def test_limits_recover_additively_per_quiet_interval(make_budget, clock):
    budget = make_budget(adaptive=Adaptive(interval_ms=5_000, step_fraction=0.1))
    _send_at_the_limit(budget)
    budget.report_429(retry_after_s=0)
    clock.now += 5_000 * 3
    assert budget.headroom().limit_rpm == 150 + 3 * 30
    clock.now += 5_000 * 100
    assert budget.headroom().limit_rpm == 300


def test_a_report_showing_another_user_cuts_to_our_share(make_budget, clock):
    budget = make_budget()
    sent = [budget.acquire_call(tokens=1_000) for _ in range(20)]
    # when the provider says only 80 requests and 100k tokens of its window are left
    budget.report_provider(
        remaining_requests=80,
        remaining_tokens=100_000,
        reset_requests_s=12.0,
        reset_tokens_s=20.0,
        sent_at_ms=sent[-1].at_ms,
    )
    # then our limits are what we used plus what is left: someone else has the rest
    room = budget.headroom()
    assert (room.limit_rpm, room.limit_tpm) == (20 + 80, 20_000 + 100_000)
    snap = budget.snapshot()["scopes"]["provider"]
    assert snap["last_report"]["remaining_requests"] == 80
    assert snap["calls_in_window"] == 20


def test_a_report_showing_room_raises_the_limit_once_the_other_client_is_gone(make_budget, clock):
    # given a limit cut to 100 by an answer that showed another client holding 200
    budget = make_budget()
    sent = [budget.acquire_call(tokens=1_000) for _ in range(20)]
    budget.report_provider(remaining_requests=80, remaining_tokens=None, sent_at_ms=sent[-1].at_ms)
    assert budget.headroom().limit_rpm == 100
    # when, 3 minutes on, the other client is gone and an answer shows the window nearly free
    clock.now += 180_000
    slot = budget.acquire_call(tokens=1_000)
    budget.report_provider(remaining_requests=299, remaining_tokens=None, sent_at_ms=slot.at_ms)
    # then the limit is the whole key: the estimate of the other client may fall 6 (2%) per
    # 5 s, 216 in 180 s, more than the 200 it was
    assert budget.headroom().limit_rpm == 300


def test_another_clients_peak_is_held_for_an_interval_before_it_is_released(make_budget, clock):
    # given an answer showing another client holding 200 of the window's 300 requests
    budget = make_budget(adaptive=Adaptive(interval_ms=5_000))
    slot = budget.acquire_call(tokens=1_000)
    budget.report_provider(remaining_requests=99, remaining_tokens=None, sent_at_ms=slot.at_ms)
    assert budget.headroom().limit_rpm == 100
    # when, 4 s on, an answer shows it 10 lower (one of its calls just left the window)
    clock.now += 4_000
    slot = budget.acquire_call(tokens=1_000)
    budget.report_provider(remaining_requests=108, remaining_tokens=None, sent_at_ms=slot.at_ms)
    # then the estimate holds its peak: an answer is as old as the model's latency, and the
    # client's next call, made meanwhile, would find a limit raised by 10 full (a 429). Released
    # at once, the estimate sat up to a step under the client's wobble beside a client taking
    # 30% of a key, where half of our 429s came from (bench/tokens_binding.py, traced).
    assert budget.headroom().limit_rpm == 100
    # and a full interval after the peak, it is released as before: 2% of 300 per interval
    clock.now += 6_000
    slot = budget.acquire_call(tokens=1_000)
    budget.report_provider(remaining_requests=107, remaining_tokens=None, sent_at_ms=slot.at_ms)
    assert budget.headroom().limit_rpm == 100 + 6


def test_a_429_while_answers_carry_headers_widens_a_gap_instead_of_halving(make_budget, clock):
    budget = make_budget(adaptive=Adaptive(interval_ms=5_000))
    _send_at_the_limit(budget)
    budget.report_provider(remaining_requests=275, remaining_tokens=None, sent_at_ms=clock.now)
    assert budget.headroom().limit_rpm == 300  # 300 - 275 - our 25: nobody else
    budget.report_429(retry_after_s=1, sent_at_ms=clock.now)
    room = budget.headroom()
    # then calls are held for Retry-After, and the limit drops by one tolerance (3), not to 150
    assert (room.limit_rpm, room.blocked_ms) == (297, 1_000)
    # and the refused call left our log: the provider did not count it
    assert budget.snapshot()["scopes"]["provider"]["calls_in_window"] == 24


def test_a_refused_calls_tokens_leave_the_window_as_its_request_does(make_budget, clock):
    # given four calls in the window, the third (50k tokens, sent in the same ms as the second)
    # refused by the provider
    budget = make_budget()
    budget.acquire_call(tokens=1_000)
    clock.now += 10
    budget.acquire_call(tokens=700)
    refused = budget.acquire_call(tokens=50_000)
    clock.now += 10
    budget.acquire_call(tokens=2_000)
    budget.report_429(retry_after_s=0, sent_at_ms=refused.at_ms, tokens=50_000)
    # then our window holds what the provider counted: three calls, 3,700 tokens. Kept in the
    # token sums, a refusal hid as many of another client's tokens from the next answer's
    # estimate for a minute (bench/tokens_binding.py --foreign-share 0.3 traced it 3-8k low)
    snap = budget.snapshot()["scopes"]["provider"]
    assert (snap["calls_in_window"], snap["tokens_in_window"]) == (3, 3_700)
    # and an answer showing another client's 100k tokens is read as 100k
    clock.now += 10
    slot = budget.acquire_call(tokens=1_000)
    budget.report_provider(
        remaining_requests=None, remaining_tokens=300_000 - 4_700 - 100_000, sent_at_ms=slot.at_ms
    )
    assert budget.headroom().limit_tpm == 200_000


def test_without_headers_for_a_window_a_429_halves_as_before(make_budget, clock):
    budget = make_budget(adaptive=Adaptive(interval_ms=5_000))
    budget.report_provider(remaining_requests=299, remaining_tokens=None, sent_at_ms=clock.now)
    clock.now += WINDOW_MS + 1
    _send_at_the_limit(budget)
    budget.report_429(retry_after_s=1)
    assert budget.headroom().limit_rpm == 150


def test_a_report_within_tolerance_changes_nothing(make_budget):
    budget = make_budget()
    for _ in range(20):
        budget.acquire_call(tokens=1_000)
    # provider counted 2 more than we did (a call racing the header): within 1% of 300
    budget.report_provider(remaining_requests=278, remaining_tokens=None)
    assert budget.headroom().limit_rpm == 300


def test_snapshot_shows_what_the_budget_decides_on(make_budget):
    budget = make_budget()
    budget.reserve(requests=3, tokens=1_800)
    budget.acquire_call(tokens=600)
    _send_at_the_limit(budget)
    budget.report_429(retry_after_s=1)
    snap = budget.snapshot()
    assert snap["redis"] == "ok"
    assert snap["configured"] == {
        "provider": {
            "rpm": 300,
            "tpm": 300_000,
            "burst_ms": 2_000,
            "strict": True,
            "margin_ms": 1_000,
            "margin_floor_ms": 100,
            "token_burst_ms": 0,
        }
    }
    assert (snap["in_flight"], snap["outstanding_requests"], snap["outstanding_tokens"]) == (1, 3, 1_800)
    scope = snap["scopes"]["provider"]
    assert scope["limit_rpm"] == 150
    assert scope["last_429_ms"] == START_MS
    assert scope["tokens_in_window"] == 600 + 25 * 10


# --- Redis unreachable ------------------------------------------------------------------------


def test_breaker_opens_after_consecutive_failures_and_half_opens_after_the_cool_down():
    now = [0.0]
    breaker = CircuitBreaker(failures=3, cooldown_s=5.0, clock=lambda: now[0])
    for _ in range(2):
        breaker.failure()
    assert breaker.state == "closed"
    breaker.failure()
    assert (breaker.state, breaker.allow(), breaker.retry_in_ms()) == ("open", False, 5_000)
    now[0] = 5.0
    assert breaker.allow() is True  # one trial call
    assert breaker.allow() is False  # and only one
    breaker.failure()
    assert breaker.state == "open"
    now[0] = 10.0
    assert breaker.allow() is True
    breaker.success()
    assert breaker.state == "closed"


@pytest.fixture
def dead_redis() -> Iterator[Client]:
    c = connect(f"redis://127.0.0.1:{free_port()}/0")
    yield c
    c.close()


def test_fail_open_grants_unmetered_work_and_never_raises(dead_redis):
    budget = Budget(redis_client=dead_redis, limits=Limits(rpm=300, tpm=300_000), failure_policy="open")
    res = granted(budget.reserve(requests=3, tokens=1_800))
    assert res.unmetered
    assert len(budget.reserve_many(count=4, requests_each=3, tokens_each=1_800)) == 4
    assert budget.settle(reservation_id=res.id, actual_tokens=10) is False
    assert budget.refund(reservation_id="abc.1@provider") is False
    room = budget.headroom()
    assert room.unmetered
    assert room.fits(requests_each=3, tokens_each=1_800) == 3  # paced: one burst per look
    assert budget.headrooms([("provider",), ("provider",)]) == [room, room]  # read together: the same
    assert budget.acquire_call(tokens=600).wait_ms == 0
    budget.report_429(retry_after_s=1)
    budget.report_provider(remaining_requests=1, remaining_tokens=1)
    assert budget.snapshot()["redis"] == "unavailable"


def test_fail_closed_denies_with_a_wait_and_never_raises(dead_redis):
    budget = Budget(redis_client=dead_redis, limits=Limits(rpm=300, tpm=300_000), failure_policy="closed")
    denied = budget.reserve(requests=3, tokens=1_800)
    assert isinstance(denied, Denied)
    assert denied.bucket == "redis"
    assert denied.wait_ms >= 1_000
    assert budget.reserve_many(count=4, requests_each=3, tokens_each=1_800) == []
    assert budget.headroom().fits(requests_each=3, tokens_each=1_800) == 0
    assert [r.fits(requests_each=3, tokens_each=1_800) for r in budget.headrooms([("provider",)] * 2)] == [
        0,
        0,
    ]
    assert budget.acquire_call(tokens=600).wait_ms >= 1_000


def test_an_open_circuit_answers_without_touching_redis(dead_redis):
    budget = Budget(
        redis_client=dead_redis, limits=Limits(rpm=300, tpm=300_000), breaker=CircuitBreaker(failures=2)
    )
    for _ in range(2):
        budget.reserve(requests=1, tokens=1)
    assert budget.breaker.state == "open"
    started = time.perf_counter()
    for _ in range(1_000):
        budget.reserve(requests=1, tokens=1)
    assert time.perf_counter() - started < 0.5


# --- settings ---------------------------------------------------------------------------------


def test_budget_from_settings_sizes_the_burst_for_a_dispatch_cycle(settings):
    settings.LLM_RPM, settings.LLM_TPM = 60, 600_000
    settings.DISPATCH_INTERVAL = 2.0
    settings.LLM_CALLS_PER_OUTREACH, settings.LLM_EST_TOKENS_PER_CALL = 3, 600
    settings.BUDGET_FAILURE_POLICY = "closed"
    settings.LLM_BUDGET_STRICT = True
    budget = budget_from_settings()
    # a cycle's refill (1.8 requests) plus one outreach (3) must fit: 5.3 s of burst at 55 rpm
    assert budget.limits == Limits(rpm=60, tpm=600_000, burst_ms=5_273, strict=True)
    assert budget.failure_policy == "closed"
    assert budget.reservation_ttl_ms == (settings.DISPATCH_STUCK_AFTER_S + 120) * 1_000
    # the product's default shape is paced: the pacer, not the bucket, keeps every window under L
    settings.LLM_BUDGET_STRICT = False
    assert budget_from_settings().limits.strict is False


def test_every_key_a_script_touches_lies_in_one_cluster_slot(make_budget):
    # given a budget with the provider's limits and families of scopes (organizations, LLM
    # deployments, and any family added later: the hash tag is the prefix, never the scope)
    budget = make_budget(
        scope_limits={f"{family}:*": Limits(rpm=60, tpm=60_000) for family in ("org", "dep", "future")}
    )
    scopes = ("provider", "org:7", "dep:gpt-4o.eu:1", "future:x")
    # when the keys of every script are listed: reservations (buckets and rates) and call logs
    keys = [k.decode() for k in budget.plan(scopes).keys]
    keys += [k for scope in scopes for k in (*budget._call_log_keys(scope), budget.key("spread", scope))]
    # then they share one slot, so a Redis Cluster runs each script on one node
    assert {key_slot(k.encode()) for k in keys} == {key_slot(budget.key("res").encode())}


def test_a_job_on_two_deployments_and_its_organization_reserves_settles_and_refunds(make_budget):
    # given two deployments' scopes and an organization's cap (on a single Redis, and on a
    # cluster: every key of these scripts in one slot, or redis-py refuses the EVALSHA)
    budget = make_budget(
        scope_limits={f"{family}:*": Limits(rpm=600, tpm=600_000) for family in ("org", "dep")}
    )
    small, large = ("dep:small:0", "org:7"), ("dep:large:1", "org:7")
    # when a job reserves its two calls on small and its one on large, then settles and refunds
    on_small = granted(budget.reserve(requests=2, tokens=1_200, scopes=small))
    on_large = granted(budget.reserve(requests=1, tokens=600, scopes=large))
    budget.settle(reservation_id=on_small.id, actual_tokens=900, actual_requests=2)
    budget.refund(reservation_id=on_large.id)
    # then the organization's bucket was charged small's settled use only
    assert (
        budget.headroom(scopes=("org:7",)).requests == budget.headroom(scopes=("dep:large:1",)).requests - 2
    )


def test_a_prefix_with_a_brace_is_refused(client):
    with pytest.raises(ValueError, match="braces"):
        Budget(redis_client=client, limits=Limits(rpm=60, tpm=60_000), prefix="a{b}")


@pytest.mark.slow
def test_budget_from_settings_keeps_its_keys_on_the_cluster_named_by_budget_redis_url(
    settings, redis_cluster
):
    # given BUDGET_REDIS_URL naming one node of a Redis Cluster (REDIS_URL stays the single Redis)
    settings.BUDGET_REDIS_URL = redis_cluster.url
    budget = budget_from_settings()
    budget.prefix = f"test-settings-{uuid.uuid4().hex}"
    # when a job reserves
    granted(budget.reserve(requests=3, tokens=1_800))
    # then the reservation is on the cluster, not on the single Redis
    cluster = connect(redis_cluster.url)
    assert cluster.hlen(budget.key("res")) == 1
    assert not redis.Redis.from_url(settings.REDIS_URL).exists(budget.key("res"))
    budget.reset()
    cluster.close()
