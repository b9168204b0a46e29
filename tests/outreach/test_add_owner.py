from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from outreach.models import Owner

pytestmark = pytest.mark.django_db

BASE = ["Ada", "--kind", "agent", "--daily-limit", "40", "--hours", "09:00-17:00", "--tz", "Europe/Berlin"]


def test_add_owner_creates_then_updates() -> None:
    call_command("add_owner", *BASE, "--org", "Acme", "--review-required", "--days", "mon,wed,fri")
    owner = Owner.objects.get(name="Ada")
    assert (owner.organization.name, owner.daily_limit, owner.review_required) == ("Acme", 40, True)
    assert (owner.working_days, owner.timezone, str(owner.hours_start)) == (
        "135",
        "Europe/Berlin",
        "09:00:00",
    )
    call_command("add_owner", *BASE[:4], "60", *BASE[5:], "--org", "Acme")
    assert Owner.objects.get(name="Ada").daily_limit == 60
    assert Owner.objects.count() == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--tz": "Mars/Base"}, "--tz: 'Mars/Base' is not a known time zone"),
        ({"--hours": "9-5"}, "--hours '9-5': expected HH:MM-HH:MM"),
        ({"--hours": "17:00-09:00"}, "the start must be before the end"),
        ({"--hours": "25:00-26:00"}, "not a valid time of day"),
        ({"--daily-limit": "0"}, "--daily-limit 0: must be at least 1"),
        ({"--days": "funday"}, "--days 'funday'"),
    ],
)
def test_add_owner_bad_input_names_the_flag_and_writes_nothing(change: dict[str, str], message: str) -> None:
    args = list(BASE)
    for flag, value in change.items():
        if flag in args:
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    with pytest.raises(CommandError, match=message):
        call_command("add_owner", *args)
    assert not Owner.objects.exists()
