"""`add_mailbox` attaches a mailbox to owners; bad input is refused naming the flag."""

from __future__ import annotations

from datetime import date
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from outreach.models import Mailbox, VerifiedDomain
from tests.factories import make_org, make_owner

pytestmark = pytest.mark.django_db


def _run(*args: str) -> str:
    out = StringIO()
    call_command("add_mailbox", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def org() -> object:
    org = make_org(name="Acme")
    VerifiedDomain.objects.create(organization=org, domain="acme.example")
    make_owner(organization=org, name="Ann")
    make_owner(organization=org, name="Bob")
    return org


def test_a_mailbox_is_created_for_two_owners_then_changed_flag_by_flag(org: object) -> None:
    said = _run(
        "Ann@Acme.example",
        "--org",
        "Acme",
        "--owner",
        "Ann",
        "--owner",
        "Bob",
        "--daily-cap",
        "30",
        "--ramp-from",
        "2026-12-01",
        "--spacing",
        "90-300",
    )
    box = Mailbox.objects.get()
    assert said.startswith(f"Created mailbox #{box.pk} ann@acme.example in Acme for Ann, Bob: 30/day")
    assert (box.daily_cap, box.ramp_from, box.min_spacing_s, box.max_spacing_s) == (
        30,
        date(2026, 12, 1),
        90,
        300,
    )
    _run("ann@acme.example", "--org", "Acme", "--ramp-step", "3", "--no-resume")
    box.refresh_from_db()
    assert (box.daily_cap, box.ramp_step, box.active) == (30, 3, False)
    assert {o.name for o in box.owners.all()} == {"Ann", "Bob"}


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (
            ["x@other.example", "--org", "Acme"],
            "ADDRESS: address: other.example is not a verified domain of Acme",
        ),
        (["x@acme.example", "--org", "Nope"], "--org: no organization named 'Nope'."),
        (["x@acme.example", "--org", "Acme", "--owner", "Zed"], "--owner: no owner Zed in Acme."),
        (
            ["x@acme.example", "--org", "Acme", "--spacing", "300-60"],
            "--spacing '300-60': the minimum must not",
        ),
        (
            ["x@acme.example", "--org", "Acme", "--spacing", "fast"],
            "--spacing 'fast': expected MIN-MAX seconds",
        ),
        (["x@acme.example", "--org", "Acme", "--daily-cap", "0"], "--daily-cap 0: must be at least 1."),
        (["x@acme.example", "--org", "Acme", "--ramp-from", "soon"], "--ramp-from 'soon': expected a date"),
    ],
)
def test_bad_input_is_refused_naming_the_flag(org: object, args: list[str], error: str) -> None:
    with pytest.raises(CommandError) as raised:
        _run(*args)
    assert str(raised.value).startswith(error)
    assert not Mailbox.objects.exists()
