"""The email send budget on real Redis, with a fake clock passed to the Lua as its `now`."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import redis

from orchestrator.budget import Budget, Limits, SendDenied, SendGrant, SendRules
from orchestrator.budget.maths import send_bucket
from orchestrator.budget.sends import DAY_MS
from tests.orchestrator.conftest import START_MS, FakeClock


@pytest.fixture
def budget_defaults(clock: FakeClock) -> dict[str, Any]:
    return {"limits": Limits(rpm=300, tpm=300_000), "clock": clock}


def grants_in(
    budget: Budget, clock: FakeClock, *, ms: int, step_ms: int = 1, domain: str = "a.example"
) -> list[int]:
    """Ask for a send every `step_ms` for `ms`; the times (ms) of those granted."""
    times = []
    for t in range(0, ms, step_ms):
        clock.now = START_MS + t
        if isinstance(budget.reserve_send(domain=domain), SendGrant):
            times.append(t)
    return times


@pytest.mark.parametrize(
    ("limit", "window_ms", "rate", "burst_ms"),
    [
        # written out by hand: rate = floor(limit * 60000 / (window + burst)), burst = ceil(W / (limit - 1))
        (20, 1_000, 1139, 53),  # 18.98 messages/s
        (10, 1_000, 539, 112),  # 8.98/s
        (2, 1_000, 60, 1_000),  # 1/s
        (600, 60_000, 598, 101),  # 598.99/min
    ],
)
def test_send_bucket_is_strict_and_holds_one_message(
    limit: int, window_ms: int, rate: int, burst_ms: int
) -> None:
    assert send_bucket(limit=limit, window_ms=window_ms) == (rate, burst_ms)
    assert rate * (window_ms + burst_ms) <= limit * 60_000  # never more than the limit in a window
    assert rate * burst_ms >= 60_000  # one message fits


def test_a_rate_of_one_cannot_be_kept_and_says_so() -> None:
    with pytest.raises(ValueError, match="use 2 or more"):
        SendRules(per_second=1)


def test_no_limits_grants_without_redis(make_budget: Callable[..., Budget], client: redis.Redis) -> None:
    budget = make_budget(send_rules=SendRules())
    assert budget.reserve_send(domain="a.example") == SendGrant(id="")
    assert budget.release_send(reservation_id="", sent=False) is False
    assert not list(client.scan_iter(match=f"{{{budget.prefix}}}:*"))


def test_per_second_rate_never_exceeded_in_any_second(
    make_budget: Callable[..., Budget], clock: FakeClock
) -> None:
    # given 20/s, asked every millisecond for 5 s
    budget = make_budget(send_rules=SendRules(per_second=20))
    times = grants_in(budget, clock, ms=5_000)
    # then no 1 s window holds more than 20, and the sustained rate is the strict one (~19/s)
    assert max(sum(1 for u in times if t <= u < t + 1_000) for t in times) <= 20
    assert 93 <= len(times) <= 96  # 1 at once + 18.98/s x 5 s
    gaps = {b - a for a, b in itertools.pairwise(times)}
    assert gaps <= {52, 53}  # evenly spaced: never a clump


def test_denied_send_says_the_rate_and_the_wait(make_budget: Callable[..., Budget], clock: FakeClock) -> None:
    budget = make_budget(send_rules=SendRules(per_second=20, per_minute=600))
    assert isinstance(budget.reserve_send(domain="a.example"), SendGrant)
    denied = budget.reserve_send(domain="a.example")
    assert isinstance(denied, SendDenied)
    assert denied.reason in ("send rate 20/s reached", "send rate 600/min reached")
    assert 0 < denied.wait_ms <= 101


def test_domain_daily_cap_counts_per_domain_and_resets_at_utc_midnight(
    make_budget: Callable[..., Budget], clock: FakeClock
) -> None:
    budget = make_budget(send_rules=SendRules(domain_daily=3))
    clock.now = (START_MS // DAY_MS + 1) * DAY_MS - 60_000  # 23:59 UTC
    granted = [budget.reserve_send(domain="a.example") for _ in range(4)]
    assert [isinstance(g, SendGrant) for g in granted] == [True, True, True, False]
    assert granted[3] == SendDenied(60_000, "sender domain a.example: 3/day reached, resumes 00:00 UTC")
    assert isinstance(budget.reserve_send(domain="b.example"), SendGrant)  # another domain: its own day
    clock.now += 60_000  # 00:00 UTC
    assert isinstance(budget.reserve_send(domain="a.example"), SendGrant)


def test_warmup_ramp_caps_the_first_days_then_the_daily_limit(
    make_budget: Callable[..., Budget], clock: FakeClock
) -> None:
    budget = make_budget(send_rules=SendRules(domain_daily=5, warmup=(1, 2)))
    day0 = (START_MS // DAY_MS) * DAY_MS
    sent_per_day = []
    last: SendGrant | SendDenied | None = None
    for day in range(4):
        clock.now = day0 + day * DAY_MS + 3_600_000
        results = [budget.reserve_send(domain="new.example") for _ in range(10)]
        sent_per_day.append(sum(isinstance(r, SendGrant) for r in results))
        last = results[-1] if day == 1 else last
    assert sent_per_day == [1, 2, 5, 5]
    assert isinstance(last, SendDenied)
    assert last.reason == "sender domain new.example: 2/day reached (warm-up day 2), resumes 00:00 UTC"


def test_refund_gives_the_message_back_once(make_budget: Callable[..., Budget], clock: FakeClock) -> None:
    budget = make_budget(send_rules=SendRules(per_second=2, domain_daily=1))
    grant = budget.reserve_send(domain="a.example")
    assert isinstance(grant, SendGrant)
    assert isinstance(budget.reserve_send(domain="a.example"), SendDenied)
    # when the message never left
    assert budget.release_send(reservation_id=grant.id, sent=False) is True
    assert budget.release_send(reservation_id=grant.id, sent=False) is False  # never twice
    # then the day's count and the rate both have room again
    again = budget.reserve_send(domain="a.example")
    assert isinstance(again, SendGrant)
    assert isinstance(budget.reserve_send(domain="a.example"), SendDenied)


def test_a_sent_message_stays_counted(make_budget: Callable[..., Budget], clock: FakeClock) -> None:
    budget = make_budget(send_rules=SendRules(domain_daily=1))
    grant = budget.reserve_send(domain="a.example")
    assert isinstance(grant, SendGrant)
    assert budget.release_send(reservation_id=grant.id, sent=True) is True
    assert budget.release_send(reservation_id=grant.id, sent=False) is False  # a late refund: nothing
    assert isinstance(budget.reserve_send(domain="a.example"), SendDenied)


def test_redis_down_follows_the_failure_policy(clock: FakeClock) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.05)
    rules = SendRules(per_second=5)
    opened = Budget(redis_client=dead, limits=Limits(rpm=300, tpm=300_000), clock=clock)
    opened.send_rules = rules
    closed = Budget(
        redis_client=dead, limits=Limits(rpm=300, tpm=300_000), clock=clock, failure_policy="closed"
    )
    closed.send_rules = rules
    assert opened.reserve_send(domain="a.example") == SendGrant(id="send-unmetered", unmetered=True)
    denied = closed.reserve_send(domain="a.example")
    assert isinstance(denied, SendDenied)
    assert denied.reason == "send budget unavailable (Redis down, closed policy)"
    assert opened.release_send(reservation_id="send-unmetered", sent=False) is False


def test_the_margin_widens_the_window_the_rate_is_kept_in() -> None:
    # written out by hand: burst = ceil(1200 / 19) = 64, rate = floor(20 * 60000 / 1264) = 949 (15.82/s)
    assert send_bucket(limit=20, window_ms=1_000, margin_ms=200) == (949, 64)
    assert 949 * (1_000 + 200 + 64) <= 20 * 60_000  # never 20 reservations in any 1.2 s
    assert SendRules(per_second=20, margin_ms=200).rate_per_s == pytest.approx(949 / 60)
