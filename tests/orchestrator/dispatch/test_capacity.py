from __future__ import annotations

from datetime import UTC, datetime, time

import pytest

from orchestrator.dispatch.owner_limits import OwnerRules, local_day_start, next_opening, owner_capacity

BERLIN = OwnerRules(1, 50, time(9), time(17), "12345", "Europe/Berlin")


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


@pytest.mark.parametrize(
    ("now", "used", "remaining", "reason"),
    [
        (_utc(2026, 3, 4, 10, 0), 0, 50, ""),  # Wed 11:00 Berlin
        (_utc(2026, 3, 4, 10, 0), 49, 1, ""),
        (_utc(2026, 3, 4, 10, 0), 50, 0, "daily limit 50 reached, resumes 09:00 Europe/Berlin"),
        (_utc(2026, 3, 4, 6, 0), 0, 0, "outside operating hours 09:00-17:00, resumes 09:00 Europe/Berlin"),
        (_utc(2026, 3, 6, 10, 0), 50, 0, "daily limit 50 reached, resumes Mon 09:00 Europe/Berlin"),  # Friday
        (
            _utc(2026, 3, 7, 10, 0),
            0,
            0,
            "outside operating hours 09:00-17:00, resumes Mon 09:00 Europe/Berlin",
        ),
        (_utc(2026, 3, 4, 16, 0), 0, 0, "outside operating hours 09:00-17:00, resumes 09:00 Europe/Berlin"),
    ],
)
def test_owner_capacity_table(now: datetime, used: int, remaining: int, reason: str) -> None:
    capacity = owner_capacity(rules=BERLIN, now=now, used_today=used)
    assert (capacity.remaining, capacity.blocked_reason) == (remaining, reason)


def test_local_day_spans_23_hours_on_spring_forward_and_25_on_fall_back() -> None:
    # Europe/Berlin springs forward on 2026-03-29 and falls back on 2026-10-25.
    spring = local_day_start(tz="Europe/Berlin", now=_utc(2026, 3, 29, 12))
    after_spring = local_day_start(tz="Europe/Berlin", now=_utc(2026, 3, 30, 12))
    # (subtract in UTC: aware datetimes sharing a tzinfo subtract by wall clock)
    assert (after_spring.astimezone(UTC) - spring.astimezone(UTC)).total_seconds() == 23 * 3600
    fall = local_day_start(tz="Europe/Berlin", now=_utc(2026, 10, 25, 12))
    after_fall = local_day_start(tz="Europe/Berlin", now=_utc(2026, 10, 26, 12))
    assert (after_fall.astimezone(UTC) - fall.astimezone(UTC)).total_seconds() == 25 * 3600
    # local midnight of the DST day is 23:00 UTC the evening before (still CET)
    assert spring.astimezone(UTC) == _utc(2026, 3, 28, 23)


def test_hours_follow_local_clock_across_dst() -> None:
    rules = OwnerRules(2, 10, time(9), time(17), "1234567", "America/New_York")
    # 09:30 local is 14:30 UTC in winter (EST) and 13:30 UTC in summer (EDT)
    assert owner_capacity(rules=rules, now=_utc(2026, 3, 7, 14, 30), used_today=0).remaining == 10
    assert owner_capacity(rules=rules, now=_utc(2026, 3, 9, 13, 30), used_today=0).remaining == 10
    assert owner_capacity(rules=rules, now=_utc(2026, 3, 7, 13, 30), used_today=0).remaining == 0
    assert next_opening(rules=rules, now=_utc(2026, 3, 8, 3, 0)).astimezone(UTC) == _utc(2026, 3, 8, 13, 0)


@pytest.mark.parametrize("at", [(0, 0, 0), (12, 0, 0), (23, 59, 30), (23, 59, 59)])
def test_hours_that_end_at_midnight_are_open_to_the_last_second_of_the_day(at: tuple[int, int, int]) -> None:
    # given an agent working round the clock (00:00-00:00) and one working until midnight
    all_day = OwnerRules(3, 10, time(0), time(0), "1234567", "UTC")
    evenings = OwnerRules(4, 10, time(18), time(0), "1234567", "UTC")
    now = datetime(2026, 11, 26, *at, tzinfo=UTC)
    # then the first is open at every second of the day, the second from 18:00 to midnight
    assert owner_capacity(rules=all_day, now=now, used_today=0).remaining == 10
    assert owner_capacity(rules=evenings, now=now, used_today=0).remaining == (10 if at[0] >= 18 else 0)
