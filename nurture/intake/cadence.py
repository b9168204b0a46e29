"""When the steps of a nurture sequence fall due: pure functions of (assignment time, time zone, cadence).

A cadence is business-day offsets from the assignment ("3,7"). Business days are Monday to
Friday in the *lead's* time zone: the emails are meant to land in the prospect's working week,
whatever the seller's. A nudge is due at 09:00 local on the Nth business day after the
assignment's local date (the start of the prospect's day, rather than echoing whatever hour the
file happened to be loaded), so "assigned Friday 16:00 in Tokyo, 3 days" = Wednesday 09:00 JST.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime, time, timedelta
from functools import lru_cache
from zoneinfo import ZoneInfo

NUDGE_LOCAL_TIME = time(9, 0)
DEFAULT_NUDGE_DAYS = "3,7"


def parse_nudge_days(*, value: str) -> tuple[int, ...]:
    """ "3,7" -> (3, 7); the models' validator has already checked the format."""
    return tuple(int(part) for part in value.split(",") if part.strip())


def add_business_days(*, day: date, n: int) -> date:
    """The nth Monday-Friday date after `day` (a weekend `day` counts from the next Monday)."""
    # Business days after a Saturday or Sunday are those after the Friday before it; from a
    # weekday, every 5 business days are exactly one calendar week.
    start = day - timedelta(days=max(0, day.weekday() - 4))
    weeks, rest = divmod(n, 5)
    current = start + timedelta(weeks=weeks)
    while rest:
        current += timedelta(days=1)
        if current.weekday() < 5:
            rest -= 1
    return current


def nudge_times(*, assigned_at: datetime, tz: str, days: Sequence[int]) -> list[datetime]:
    """The due time of each nudge (aware, in UTC's terms comparable with any aware datetime)."""
    return list(_nudge_times(assigned_at, tz, tuple(days)))


@lru_cache(maxsize=4096)
def _nudge_times(assigned_at: datetime, tz: str, days: tuple[int, ...]) -> tuple[datetime, ...]:
    # Cached: a file of 100,000 leads has one assignment time and a handful of (zone, cadence)
    # pairs, so this runs a few dozen times, not once per lead.
    zone = ZoneInfo(tz)
    local_day = assigned_at.astimezone(zone).date()
    return tuple(
        datetime.combine(add_business_days(day=local_day, n=n), NUDGE_LOCAL_TIME, tzinfo=zone) for n in days
    )
