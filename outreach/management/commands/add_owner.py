"""python manage.py add_owner NAME --kind agent|human --daily-limit N --hours 09:00-17:00 --tz Area/City
[--days mon-fri] [--review-required|--no-review-required] [--draft-ahead-days N] [--weight N] [--org NAME]

A new owner needs --kind, --daily-limit, --hours and --tz; the rest default to mon-fri, review
not required, no drafts ahead, weight 1, organization "Default". On an existing owner it changes only what its
flags name: a flag left out keeps the stored value (re-running it to change the daily limit
must not turn review off). Without --org it finds the owner by name in whichever organization
holds it. Turning review off here is recorded with no user (`review_disabled_by` NULL) and
`review_disabled_via` "add_owner command": a shell user is not a person the database knows.
"""

from __future__ import annotations

import argparse
import re
from datetime import time
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from outreach.models import DAY_NAMES, MIDNIGHT, Owner, working_days_text
from outreach.services.owners import OwnerSpec, owner_upsert

_HOURS = re.compile(r"^(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})$")
_DAYS = {name.lower(): n for n, name in enumerate(DAY_NAMES, start=1)}  # "mon" -> 1


def parse_hours(value: str) -> tuple[time, time]:
    match = _HOURS.match(value.strip())
    if not match:
        raise CommandError(f"--hours {value!r}: expected HH:MM-HH:MM, e.g. 09:00-17:00.")
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    if (h2, m2) == (24, 0):  # the end of the day, stored as midnight
        h2 = 0
    try:
        start, end = time(h1, m1), time(h2, m2)
    except ValueError:
        raise CommandError(
            f"--hours {value!r}: not a valid time of day (hours 0-23, minutes 0-59; 24:00 ends at midnight)."
        ) from None
    if start >= end and end != MIDNIGHT:
        raise CommandError(
            f"--hours {value!r}: the start must be before the end, e.g. 09:00-17:00 "
            "(00:00-24:00 is round the clock)."
        )
    return start, end


def parse_days(value: str) -> str:
    """'mon-fri', 'mon,wed,fri' or ISO digits '135' -> ISO weekday digits."""
    value = value.strip().lower()
    if re.fullmatch(r"[1-7]{1,7}", value):
        return "".join(sorted(set(value)))
    days: set[int] = set()
    for part in value.split(","):
        ends = part.strip().split("-")
        if not all(e in _DAYS for e in ends) or len(ends) > 2:
            raise CommandError(f"--days {value!r}: use mon-fri, mon,wed,fri or ISO digits like 12345.")
        first, last = _DAYS[ends[0]], _DAYS[ends[-1]]
        if first > last:
            raise CommandError(f"--days {value!r}: a range runs forwards, e.g. mon-fri.")
        days.update(range(first, last + 1))
    return "".join(str(d) for d in sorted(days))


class Command(BaseCommand):
    help = "Create or update an owner (an AI agent or a human seller) with its limits and hours."

    def add_arguments(self, parser: CommandParser) -> None:
        # No argparse defaults: an absent flag must be told apart from one given (None = keep).
        parser.add_argument("name")
        parser.add_argument("--kind", choices=[k.value for k in Owner.Kind], help="Needed for a new owner.")
        parser.add_argument(
            "--daily-limit", type=int, help="Emails per local day (>= 1). Needed for a new owner."
        )
        parser.add_argument(
            "--hours", help="Operating hours in the owner's time zone, HH:MM-HH:MM. Needed for a new owner."
        )
        parser.add_argument("--tz", help="IANA time zone, e.g. Europe/Berlin. Needed for a new owner.")
        parser.add_argument("--days", help="Working days: mon-fri (new owner's default), mon,wed or 135.")
        parser.add_argument(
            "--review-required",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="Drafts wait for human approval (new owner's default: not required).",
        )
        parser.add_argument(
            "--draft-ahead-days",
            type=int,
            help="Review required: days of drafts written beyond today's (0-14; new owner's default 0).",
        )
        parser.add_argument("--weight", type=int, help="Fair-share weight (>= 1; new owner's default 1).")
        parser.add_argument(
            "--org", help='Organization name (created if missing; new owner\'s default "Default").'
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["daily_limit"] is not None and opts["daily_limit"] < 1:
            raise CommandError(f"--daily-limit {opts['daily_limit']}: must be at least 1.")
        if opts["weight"] is not None and opts["weight"] < 1:
            raise CommandError(f"--weight {opts['weight']}: must be at least 1.")
        ahead = opts["draft_ahead_days"]
        if ahead is not None and not 0 <= ahead <= 14:
            raise CommandError(f"--draft-ahead-days {ahead}: must be from 0 to 14.")
        start, end = parse_hours(opts["hours"]) if opts["hours"] is not None else (None, None)
        spec = OwnerSpec(
            name=opts["name"].strip(),
            kind=opts["kind"],
            daily_limit=opts["daily_limit"],
            hours_start=start,
            hours_end=end,
            timezone=opts["tz"],
            review_required=opts["review_required"],
            working_days=parse_days(opts["days"]) if opts["days"] is not None else None,
            weight=opts["weight"],
            organization=opts["org"],
            draft_ahead_days=ahead,
        )
        try:
            owner, created = owner_upsert(spec=spec, by=None, via="add_owner command")
        except ValidationError as exc:
            raise CommandError(_describe(exc)) from None
        verb = "Created" if created else "Updated"
        self.stdout.write(
            self.style.SUCCESS(
                f"{verb} owner #{owner.pk} {owner.name} ({owner.kind}) in {owner.organization.name}: "
                f"{owner.daily_limit}/day, {owner.hours_start:%H:%M}-{owner.hours_end:%H:%M} {owner.timezone}, "
                f"days {working_days_text(owner.working_days)}, "
                f"review {'required' if owner.review_required else 'not required'}"
                f"{f', {owner.draft_ahead_days} days of drafts ahead' if owner.draft_ahead_days else ''}."
            )
        )


_FLAG = {
    "kind": "--kind",
    "hours_start": "--hours",
    "hours_end": "--hours",
    "organization": "--org",
    "timezone": "--tz",
    "daily_limit": "--daily-limit",
    "name": "NAME",
    "weight": "--weight",
    "draft_ahead_days": "--draft-ahead-days",
    "hours": "--hours",
}


def _describe(exc: ValidationError) -> str:
    if not hasattr(exc, "error_dict"):
        return " ".join(exc.messages)
    missing = [
        field for field, errors in exc.error_dict.items() if "required for a new owner" in errors[0].messages
    ]
    if missing:
        flags = ", ".join(dict.fromkeys(_FLAG.get(field, field) for field in missing))
        return f"{flags}: required for a new owner (on an existing one, left-out flags keep their values)."
    return " ".join(
        f"{_FLAG.get(field, field)}: {' '.join(str(m) for m in errors[0].messages)}"
        for field, errors in exc.error_dict.items()
    )
