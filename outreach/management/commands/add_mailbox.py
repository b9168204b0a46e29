"""python manage.py add_mailbox ADDRESS --org NAME [--owner NAME ...] [--daily-cap N]
[--ramp-start N] [--ramp-step N] [--ramp-from YYYY-MM-DD] [--spacing MIN-MAX] [--pause|--resume]

Creates the mailbox at ADDRESS (on one of the organization's verified domains) or updates it:
a flag left out keeps the stored value (on a new mailbox, the defaults: 40/day, warm-up from
today at 5 +2 a day, 60-240 s between sends). Each --owner adds an owner it serves.
"""

from __future__ import annotations

import argparse
import re
from datetime import date
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from outreach.services.mailboxes import MailboxSpec, mailbox_upsert

_SPACING = re.compile(r"^(\d+)-(\d+)$")
_FLAG = {
    "organization": "--org",
    "address": "ADDRESS",
    "owners": "--owner",
    "daily_cap": "--daily-cap",
    "ramp_start": "--ramp-start",
    "ramp_step": "--ramp-step",
    "ramp_from": "--ramp-from",
    "min_spacing_s": "--spacing",
    "max_spacing_s": "--spacing",
    "__all__": "--spacing",
}


def parse_spacing(value: str) -> tuple[int, int]:
    match = _SPACING.match(value.strip())
    if not match:
        raise CommandError(f"--spacing {value!r}: expected MIN-MAX seconds, e.g. 60-240.")
    low, high = int(match.group(1)), int(match.group(2))
    if low > high:
        raise CommandError(f"--spacing {value!r}: the minimum must not exceed the maximum.")
    return low, high


def parse_date(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise CommandError(f"--ramp-from {value!r}: expected a date, YYYY-MM-DD.") from None


class Command(BaseCommand):
    help = "Create or update a mailbox (an address email leaves from) and attach it to owners."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("address")
        parser.add_argument("--org", required=True, help="The organization's name.")
        parser.add_argument("--owner", action="append", default=[], help="An owner it serves (repeatable).")
        parser.add_argument("--daily-cap", type=int, help="Emails a day once warmed up (new: 40).")
        parser.add_argument("--ramp-start", type=int, help="Emails on the warm-up's first day (new: 5).")
        parser.add_argument("--ramp-step", type=int, help="Emails added each warm-up day (new: 2).")
        parser.add_argument("--ramp-from", help="The warm-up's first day, YYYY-MM-DD (new: today).")
        parser.add_argument(
            "--spacing", help="Seconds between its sends, MIN-MAX, drawn at random (new: 60-240)."
        )
        parser.add_argument(
            "--resume", action=argparse.BooleanOptionalAction, default=None, help="--no-resume pauses it."
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        for flag in ("daily_cap", "ramp_start"):
            if opts[flag] is not None and opts[flag] < 1:
                raise CommandError(f"--{flag.replace('_', '-')} {opts[flag]}: must be at least 1.")
        if opts["ramp_step"] is not None and opts["ramp_step"] < 0:
            raise CommandError(f"--ramp-step {opts['ramp_step']}: must not be negative.")
        low, high = parse_spacing(opts["spacing"]) if opts["spacing"] else (None, None)
        spec = MailboxSpec(
            address=opts["address"],
            organization=opts["org"],
            owners=tuple(name.strip() for name in opts["owner"]),
            daily_cap=opts["daily_cap"],
            ramp_start=opts["ramp_start"],
            ramp_step=opts["ramp_step"],
            ramp_from=parse_date(opts["ramp_from"]) if opts["ramp_from"] else None,
            min_spacing_s=low,
            max_spacing_s=high,
            active=opts["resume"],
        )
        try:
            box, created = mailbox_upsert(spec=spec)
        except ValidationError as exc:
            raise CommandError(_describe(exc)) from None
        owners = ", ".join(sorted(o.name for o in box.owners.all())) or "no owner yet"
        self.stdout.write(
            self.style.SUCCESS(
                f"{'Created' if created else 'Updated'} mailbox #{box.pk} {box.address} in {box.organization.name} "
                f"for {owners}: {box.daily_cap}/day, warm-up from {box.ramp_from} at {box.ramp_start} "
                f"+{box.ramp_step}/day, {box.min_spacing_s}-{box.max_spacing_s} s apart, "
                f"{'active' if box.active else 'paused'}."
            )
        )


def _describe(exc: ValidationError) -> str:
    if not hasattr(exc, "error_dict"):
        return " ".join(exc.messages)
    return " ".join(
        f"{_FLAG.get(field, field)}: {' '.join(str(m) for m in errors[0].messages)}"
        for field, errors in exc.error_dict.items()
    )
