"""Owner capacity: the daily email limit in the owner's local day and its operating hours.

Pure functions of (owner rules, now, emails already used today): no ORM, so DST and day
boundaries are tested directly. "Local day" is the calendar day in the owner's time zone
(zoneinfo), so the limit resets at the owner's midnight however the UTC offset moves.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import lru_cache
from typing import NamedTuple
from zoneinfo import ZoneInfo

from outreach.models import DAY_NAMES, MIDNIGHT, Owner


@dataclass(frozen=True)
class OwnerRules:
    owner_id: int
    daily_limit: int
    hours_start: time
    hours_end: time
    working_days: str  # ISO weekday digits, Monday=1
    timezone: str


def owner_rules(owner: Owner) -> OwnerRules:
    """An Owner record's rules (its daily limit, hours, days and time zone)."""
    return OwnerRules(
        owner.pk, owner.daily_limit, owner.hours_start, owner.hours_end, owner.working_days, owner.timezone
    )


class Capacity(NamedTuple):
    """A tuple, not a frozen dataclass: a cycle makes one per owner it judges (hundreds), and a
    frozen dataclass's __init__ sets each field through object.__setattr__."""

    owner_id: int
    remaining: int  # emails this owner may still start now (0 = deferred)
    blocked_reason: str = ""
    open: bool = True  # inside its hours on a working day (False: `blocked_reason` says when it opens)


@lru_cache(maxsize=1024)
def _local(tz: str, now: datetime) -> datetime:
    """`now` in zone `tz`: the cycle asks once per time zone, not once per owner of it."""
    return now.astimezone(ZoneInfo(tz))


@lru_cache(maxsize=1024)
def local_day_start(*, tz: str, now: datetime) -> datetime:
    """The owner's local midnight today, as an aware datetime (compare it with UTC columns).
    Made once per time zone and `now`, as `_local`: a cycle's owners share a few zones."""
    return datetime.combine(_local(tz, now).date(), time(0), tzinfo=ZoneInfo(tz))


def _is_open(rules: OwnerRules, local: datetime) -> bool:
    """Inside the hours on a working day; an end of 00:00 is midnight (00:00-00:00: all day)."""
    now = local.time()
    before_end = rules.hours_end == MIDNIGHT or now < rules.hours_end
    return str(local.isoweekday()) in rules.working_days and rules.hours_start <= now and before_end


def next_opening(*, rules: OwnerRules, now: datetime, after_today: bool = False) -> datetime:
    """The next local time the owner's hours begin on a working day (today's if still ahead)."""
    zone = ZoneInfo(rules.timezone)
    local = now.astimezone(zone)
    for offset in range(1 if after_today else 0, 8):
        day: date = local.date() + timedelta(days=offset)
        start = datetime.combine(day, rules.hours_start, tzinfo=zone)
        if str(day.isoweekday()) in rules.working_days and (start > local or offset > 0):
            return start
    raise ValueError(f"owner {rules.owner_id} has no working days ({rules.working_days!r})")


def _resumes(rules: OwnerRules, at: datetime, now: datetime) -> str:
    """'resumes 09:00 Europe/Berlin' (today or tomorrow) or 'resumes Mon 09:00 Europe/Berlin'."""
    days_ahead = (at.date() - now.astimezone(ZoneInfo(rules.timezone)).date()).days
    day = "" if days_ahead <= 1 else f"{DAY_NAMES[at.weekday()]} "
    return f"resumes {day}{at:%H:%M} {rules.timezone}"


def owner_capacity(*, rules: OwnerRules, now: datetime, used_today: int) -> Capacity:
    """How many more emails the owner may start now, and why not when it is none.

    `used_today` counts emails sent in the owner's local day plus those already in flight,
    so a cycle never hands out more than the limit however many are mid-generation.
    """
    local = _local(rules.timezone, now)
    if not _is_open(rules, local):
        at = next_opening(rules=rules, now=now)
        hours = f"{rules.hours_start:%H:%M}-{rules.hours_end:%H:%M}"
        return Capacity(
            rules.owner_id, 0, f"outside operating hours {hours}, {_resumes(rules, at, now)}", open=False
        )
    remaining = rules.daily_limit - used_today
    if remaining <= 0:
        at = next_opening(rules=rules, now=now, after_today=True)
        return Capacity(
            rules.owner_id, 0, f"daily limit {rules.daily_limit} reached, {_resumes(rules, at, now)}"
        )
    return Capacity(rules.owner_id, remaining)
