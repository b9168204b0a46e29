from __future__ import annotations

import io

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
        ({"--draft-ahead-days": "15"}, "--draft-ahead-days 15: must be from 0 to 14"),
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


def test_rerun_changing_only_the_daily_limit_keeps_everything_else() -> None:
    # given an owner created with review required and its own days, weight and organization
    call_command(
        "add_owner", *BASE, "--org", "Acme", "--review-required", "--days", "mon,wed", "--weight", "3"
    )
    # when add_owner is run again naming only the daily limit
    call_command("add_owner", "Ada", "--daily-limit", "60")
    # then only the daily limit changed: review stays on (it used to be turned off silently)
    owner = Owner.objects.get(name="Ada")
    assert (owner.daily_limit, owner.review_required, owner.kind, owner.working_days) == (
        60,
        True,
        "agent",
        "13",
    )
    assert (owner.weight, owner.timezone, owner.organization.name) == (3, "Europe/Berlin", "Acme")
    assert (str(owner.hours_start), str(owner.hours_end)) == ("09:00:00", "17:00:00")
    assert owner.review_disabled_at is None


def test_draft_ahead_days_are_set_kept_on_a_rerun_and_said_with_the_days_by_name() -> None:
    # given a seller created with review and a day of drafts ahead
    out = io.StringIO()
    call_command(
        "add_owner", *BASE, "--review-required", "--draft-ahead-days", "1", "--days", "135", stdout=out
    )
    # then the command says so, with the days by name
    assert "days Mon, Wed, Fri, review required, 1 days of drafts ahead." in out.getvalue()
    # and a re-run naming only the limit keeps it
    call_command("add_owner", "Ada", "--daily-limit", "60")
    assert Owner.objects.get(name="Ada").draft_ahead_days == 1


def test_rerun_with_every_other_flag_keeps_review_on() -> None:
    call_command("add_owner", *BASE, "--review-required")
    call_command("add_owner", *BASE[:4], "70", "--hours", "08:00-16:00", "--tz", "UTC", "--weight", "2")
    owner = Owner.objects.get(name="Ada")
    assert (owner.review_required, owner.daily_limit, owner.timezone, owner.weight) == (True, 70, "UTC", 2)


def test_no_review_required_turns_review_off_and_records_the_command() -> None:
    # given an owner whose drafts wait for review
    call_command("add_owner", *BASE, "--review-required")
    # when the shell command turns review off
    call_command("add_owner", "Ada", "--no-review-required")
    # then it is off, and the record says when and that the command (no person) did it
    owner = Owner.objects.get(name="Ada")
    assert owner.review_required is False
    assert owner.review_disabled_at is not None
    assert owner.review_disabled_by is None
    assert owner.review_disabled_via == "add_owner command"


def test_new_owner_without_the_required_flags_is_refused_naming_them() -> None:
    with pytest.raises(CommandError, match="--kind, --hours, --tz: required for a new owner"):
        call_command("add_owner", "Nobody", "--daily-limit", "5")
    assert not Owner.objects.exists()


def test_new_owner_defaults_are_documented_ones() -> None:
    call_command("add_owner", *BASE)
    owner = Owner.objects.get(name="Ada")
    assert (owner.review_required, owner.working_days, owner.weight, owner.organization.name) == (
        False,
        "12345",
        1,
        "Default",
    )


def test_rerun_without_org_finds_the_owner_in_its_organization() -> None:
    call_command("add_owner", *BASE, "--org", "Acme")
    call_command("add_owner", "Ada", "--weight", "4")
    assert list(Owner.objects.values_list("organization__name", "weight")) == [("Acme", 4)]


def test_rerun_without_org_of_a_name_in_two_organizations_asks_which() -> None:
    call_command("add_owner", *BASE, "--org", "Acme")
    call_command("add_owner", *BASE, "--org", "Beta")
    with pytest.raises(CommandError, match="--org"):
        call_command("add_owner", "Ada", "--weight", "4")
    assert set(Owner.objects.values_list("weight", flat=True)) == {1}


@pytest.mark.parametrize(
    ("hours", "stored"),
    [("00:00-24:00", ("00:00:00", "00:00:00")), ("18:00-00:00", ("18:00:00", "00:00:00"))],
)
def test_hours_may_end_at_midnight_for_round_the_clock_agents(hours: str, stored: tuple[str, str]) -> None:
    args = list(BASE)
    args[args.index("--hours") + 1] = hours
    call_command("add_owner", *args)
    owner = Owner.objects.get(name="Ada")
    assert (str(owner.hours_start), str(owner.hours_end)) == stored
