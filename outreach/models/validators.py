"""Field validators the entities share: time zones, working days, nudge cadences.

The migrations name `validate_timezone` and `validate_nudge_days` as `outreach.models.<name>`;
the package's `__init__` re-exports them so those paths keep resolving.
"""

from __future__ import annotations

import zoneinfo

from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator


def validate_timezone(value: str) -> None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"{value!r} is not a known time zone: use an IANA name such as Europe/Berlin."
        ) from None


working_days_validator = RegexValidator(
    r"^[1-7]{1,7}$", "Working days are ISO weekday digits, Monday=1 .. Sunday=7, e.g. 12345."
)
DAY_NAMES = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # ISO weekday 1..7


def working_days_text(days: str) -> str:
    """ISO weekday digits as people read them: "12345" -> "Mon-Fri", "135" -> "Mon, Wed, Fri",
    "1234567" -> "Mon-Sun"; runs of three days or more are written as a range."""
    picked = sorted({int(d) for d in days if d in "1234567"})
    runs: list[list[int]] = []
    for day in picked:
        if runs and day == runs[-1][-1] + 1:
            runs[-1].append(day)
        else:
            runs.append([day])
    parts: list[str] = []
    for run in runs:
        names = [DAY_NAMES[d - 1] for d in run]
        parts.extend([f"{names[0]}-{names[-1]}"] if len(run) >= 3 else names)
    return ", ".join(parts) or "none"


MAX_NUDGES = 10


def validate_nudge_days(value: str) -> None:
    """A cadence is business-day offsets from the assignment, e.g. "3,7": nudge 1 after 3, nudge 2 after 7."""
    parts = [p.strip() for p in value.split(",")] if value.strip() else []
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= MAX_NUDGES:
        raise ValidationError(
            f"{value!r}: give 1 to {MAX_NUDGES} business-day offsets separated by commas, e.g. 3,7."
        )
    days = [int(p) for p in parts]
    if days != sorted(set(days)) or days[0] < 1 or days[-1] > 365:  # strictly rising
        raise ValidationError(f"{value!r}: offsets must rise from 1 to at most 365, e.g. 3,7.")
