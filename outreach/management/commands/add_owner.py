"""python manage.py add_owner NAME --kind agent|human --daily-limit N --hours 09:00-17:00 --tz Area/City"""

from __future__ import annotations

import re
from datetime import time
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from outreach.models import Owner
from outreach.services import OwnerSpec, owner_upsert

_HOURS = re.compile(r"^(\d{1,2}):(\d{2})-(\d{1,2}):(\d{2})$")
_DAYS = {"mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6, "sun": 7}


def parse_hours(value: str) -> tuple[time, time]:
    match = _HOURS.match(value.strip())
    if not match:
        raise CommandError(f"--hours {value!r}: expected HH:MM-HH:MM, e.g. 09:00-17:00.")
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    try:
        start, end = time(h1, m1), time(h2, m2)
    except ValueError:
        raise CommandError(
            f"--hours {value!r}: not a valid time of day (hours 0-23, minutes 0-59)."
        ) from None
    if start >= end:
        raise CommandError(f"--hours {value!r}: the start must be before the end, e.g. 09:00-17:00.")
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
        parser.add_argument("name")
        parser.add_argument("--kind", required=True, choices=[k.value for k in Owner.Kind])
        parser.add_argument("--daily-limit", required=True, type=int, help="Emails per local day (>= 1).")
        parser.add_argument(
            "--hours", required=True, help="Operating hours in the owner's time zone, HH:MM-HH:MM."
        )
        parser.add_argument("--tz", required=True, help="IANA time zone, e.g. Europe/Berlin.")
        parser.add_argument(
            "--days", default="mon-fri", help="Working days: mon-fri (default), mon,wed or 135."
        )
        parser.add_argument("--review-required", action="store_true", help="Drafts wait for human approval.")
        parser.add_argument("--weight", type=int, default=1, help="Fair-share weight (>= 1).")
        parser.add_argument("--org", default="Default", help="Organization name (created if missing).")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["daily_limit"] < 1:
            raise CommandError(f"--daily-limit {opts['daily_limit']}: must be at least 1.")
        if opts["weight"] < 1:
            raise CommandError(f"--weight {opts['weight']}: must be at least 1.")
        start, end = parse_hours(opts["hours"])
        spec = OwnerSpec(
            name=opts["name"].strip(),
            kind=opts["kind"],
            daily_limit=opts["daily_limit"],
            hours_start=start,
            hours_end=end,
            timezone=opts["tz"],
            review_required=opts["review_required"],
            working_days=parse_days(opts["days"]),
            weight=opts["weight"],
            organization=opts["org"],
        )
        try:
            owner, created = owner_upsert(spec=spec)
        except ValidationError as exc:
            raise CommandError(_describe(exc)) from None
        verb = "Created" if created else "Updated"
        self.stdout.write(
            self.style.SUCCESS(
                f"{verb} owner #{owner.pk} {owner.name} ({owner.kind}) in {spec.organization}: "
                f"{owner.daily_limit}/day, {start:%H:%M}-{end:%H:%M} {owner.timezone}, days {owner.working_days}, "
                f"review {'required' if owner.review_required else 'not required'}."
            )
        )


_FLAG = {
    "organization": "--org",
    "timezone": "--tz",
    "daily_limit": "--daily-limit",
    "name": "NAME",
    "weight": "--weight",
    "hours": "--hours",
}


def _describe(exc: ValidationError) -> str:
    if not hasattr(exc, "error_dict"):
        return " ".join(exc.messages)
    return " ".join(
        f"{_FLAG.get(field, field)}: {' '.join(str(m) for m in errors[0].messages)}"
        for field, errors in exc.error_dict.items()
    )
