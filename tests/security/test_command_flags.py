"""Bad values for management command flags: a CommandError that names the flag, and nothing written.

(CSV rows are covered in tests/nurture/intake/test_intake_csv.py, add_owner's hours/tz/days in
tests/outreach/test_add_owner.py.) Tests marked xfail(strict=True) pin bugs reported to the
owners of those commands: they start failing, as a reminder to drop the mark, once fixed.
"""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from orchestrator.models import DeadLetter
from outreach.models import AssignmentBatch, ErrorClass, Lead, Organization, Outreach, Owner, State
from tests.factories import make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db

OWNER = ["Ada", "--kind", "agent", "--daily-limit", "40", "--hours", "09:00-17:00", "--tz", "UTC"]


def _refused(command: str, *args: str) -> str:
    with pytest.raises(CommandError) as info:
        call_command(command, *args, stdout=StringIO(), stderr=StringIO())
    return str(info.value)


def _with(args: list[str], flag: str, value: str) -> list[str]:
    changed = list(args)
    if flag in changed:
        changed[changed.index(flag) + 1] = value
    else:
        changed += [flag, value]
    return changed


# --- add_owner -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--daily-limit", "lots", "argument --daily-limit: invalid int value: 'lots'"),
        ("--daily-limit", "-3", "--daily-limit -3: must be at least 1"),
        ("--daily-limit", str(10**12), "--daily-limit: Ensure this value is less than or equal to"),
        ("--weight", "0", "--weight 0: must be at least 1"),
        ("--weight", "100000", "--weight: Ensure this value is less than or equal to 32767"),
        ("--kind", "robot", "argument --kind: invalid choice: 'robot'"),
        ("--tz", "", "--tz: This field cannot be blank"),
        ("--tz", "../../etc/passwd", "--tz: '../../etc/passwd' is not a known time zone"),
        ("--hours", "", "--hours '': expected HH:MM-HH:MM"),
        ("--days", "mon-", "--days 'mon-'"),
        ("--days", "sun-mon", "--days 'sun-mon': a range runs forwards"),
    ],
)
def test_add_owner_bad_flag_is_named_and_nothing_is_written(flag: str, value: str, message: str) -> None:
    # given no owners; when add_owner runs with one bad flag value
    error = _refused("add_owner", *_with(OWNER, flag, value))
    # then the error names the flag and neither an owner nor its organization was created
    assert message in error
    assert (Owner.objects.count(), Organization.objects.count()) == (0, 0)


@pytest.mark.parametrize(
    ("name", "message"), [("   ", "NAME: This field cannot be blank"), ("x" * 201, "NAME:")]
)
def test_add_owner_bad_name_is_named(name: str, message: str) -> None:
    assert message in _refused("add_owner", name, *OWNER[1:])
    assert (Owner.objects.count(), Organization.objects.count()) == (0, 0)


@pytest.mark.parametrize("org", ["", "   ", "x" * 201])
def test_add_owner_bad_org_name_is_refused_and_no_organization_is_created(org: str) -> None:
    # given a blank or over-long organization name (it was created as-is, or crashed on the database)
    error = _refused("add_owner", *OWNER, "--org", org)
    # then it is refused, naming the organization, and nothing is written
    assert "organization name" in error
    assert (Owner.objects.count(), Organization.objects.count()) == (0, 0)


def test_add_owner_bad_org_name_names_the_flag() -> None:
    assert "--org:" in _refused("add_owner", *OWNER, "--org", "")


def test_add_owner_invalid_update_keeps_the_stored_owner() -> None:
    # given an owner; when an update carries a bad value
    call_command("add_owner", *OWNER, "--org", "Acme", stdout=StringIO())
    _refused("add_owner", *_with(OWNER, "--tz", "Nowhere/Town"), "--org", "Acme")
    # then the stored owner is unchanged
    owner = Owner.objects.get()
    assert (owner.timezone, owner.daily_limit) == ("UTC", 40)


# --- assign_leads ----------------------------------------------------------------------------------


def _nothing_loaded() -> None:
    assert (Lead.objects.count(), Outreach.objects.count(), AssignmentBatch.objects.count()) == (0, 0, 0)


@pytest.fixture
def leads_csv(tmp_path: Path) -> Path:
    make_owner(organization=make_org(name="Default"), name="Ann")
    path = tmp_path / "leads.csv"
    path.write_text("email,first_name,last_name,company,title,timezone,owner\na@x.example,Ada,,,,UTC,Ann\n")
    return path


def test_assign_leads_unknown_org_is_named(leads_csv: Path) -> None:
    assert "--org 'Nope': no such organization" in _refused("assign_leads", str(leads_csv), "--org", "Nope")
    _nothing_loaded()


@pytest.mark.parametrize("path", ["/nonexistent/leads.csv", "/"])
def test_assign_leads_unreadable_file_is_named(path: str) -> None:
    assert f"cannot read {path}" in _refused("assign_leads", path)
    _nothing_loaded()


def test_assign_leads_bad_timeout_type_is_named(leads_csv: Path) -> None:
    assert "argument --timeout: invalid float value" in _refused(
        "assign_leads", str(leads_csv), "--timeout", "soon"
    )
    _nothing_loaded()


@pytest.mark.parametrize("timeout", ["-1", "0", "nan", "inf"])
def test_assign_leads_non_positive_or_endless_timeout_is_refused_before_loading(
    leads_csv: Path, timeout: str
) -> None:
    error = _refused("assign_leads", str(leads_csv), "--no-progress", "--fan-out", "--timeout", timeout)
    assert error.startswith("--timeout")
    _nothing_loaded()


# --- replay_dead_letters ---------------------------------------------------------------------------


@pytest.fixture
def letter() -> DeadLetter:
    outreach = make_outreach(state=State.DEAD)
    return DeadLetter.objects.create(
        outreach=outreach,
        job_type="generation",
        failure_class=ErrorClass.PERMANENT,
        reason="400",
        suggested_action="fix",
        lead_id_ref=outreach.lead_id,
        owner_id_ref=outreach.owner_id,
        organization_id_ref=outreach.lead.organization_id,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reason", "bogus"], "--reason 'bogus' is not a failure class"),
        (["--reason", ""], "--reason '' is not a failure class"),
        (["--id", "abc"], "argument --id: invalid int value: 'abc'"),
        (["--id", "999999"], "--id 999999: there is no dead letter with that id"),
        (["--id", "-1"], "--id -1: there is no dead letter with that id"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_replay_dead_letters_bad_flag_is_named_and_nothing_is_replayed(
    letter: DeadLetter, args: list[str], message: str
) -> None:
    assert message in _refused("replay_dead_letters", *args)
    letter.refresh_from_db()
    assert (letter.status, letter.outreach.state) == (DeadLetter.Status.OPEN, State.DEAD)


# --- queue_stats -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--jsn"], "unrecognized arguments: --jsn"), (["extra"], "unrecognized arguments: extra")],
)
def test_queue_stats_bad_flag_is_named(args: list[str], message: str) -> None:
    assert message in _refused("queue_stats", *args)


# --- demo ------------------------------------------------------------------------------------------


@pytest.fixture
def debug(settings: Any) -> None:
    settings.DEBUG = True  # the demo refuses to run without it; the test runner turns it off


@pytest.mark.usefixtures("debug")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--for", "0"], "--for 0.0: give a positive number of seconds"),
        (["--for", "-5"], "--for -5.0: give a positive number of seconds"),
        (["--for", "soon"], "argument --for: invalid float value: 'soon'"),
        (["--for", "nan"], "--for nan: give a positive number of seconds"),
        (["--leads", "0"], "--leads 0: give 1 to 100,000"),
        (["--leads", "1000001"], "--leads 1000001: give 1 to 100,000"),
        (["--auto-approve-after", "-1"], "--auto-approve-after -1.0: give seconds, 0 or more"),
        (["--auto-approve-after", "nan"], "--auto-approve-after nan: give seconds, 0 or more"),
        (["--leads", "many"], "argument --leads: invalid int value: 'many'"),
        (["--web-port", "http"], "argument --web-port: invalid int value: 'http'"),
    ],
)
def test_demo_bad_flag_is_named_before_anything_runs(args: list[str], message: str) -> None:
    assert message in _refused("demo", *args)
    assert not Organization.objects.exists()


def test_demo_without_debug_is_refused(settings: Any) -> None:
    settings.DEBUG = False
    assert "The demo runs with DJANGO_DEBUG=1" in _refused("demo", "--for", "5")


@pytest.mark.usefixtures("debug")
def test_demo_port_out_of_range_is_named() -> None:
    assert "--web-port" in _refused("demo", "--for", "5", "--web-port", "70000")


# --- llm_sim ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--rpm", "0"], "--rpm: must be at least 1"),
        (["--rpm", "lots"], "argument --rpm: invalid int value: 'lots'"),
        (["--tpm", "-1"], "--tpm: must be at least 1"),
        (["--latency-ms", "-5"], "--latency-ms: must be at least 0"),
        (["--latency-ms", "nan"], "--latency-ms: must be a finite number"),
        (["--jitter-ms", "-1"], "--jitter-ms: must be at least 0"),
        (["--fail-rate", "1.5"], "--fail-rate: must be at least 0 and at most 1"),
        (["--fail-rate", "-0.1"], "--fail-rate: must be at least 0 and at most 1"),
        (["--mode", "leaky"], "argument --mode: invalid choice: 'leaky'"),
        (["--window-s", "0"], "--window-s: must be at least 0.001"),
        (["--shared-rps", "1e9"], "--shared-rps: must be at least 0 and at most 10000"),
        (["--shared-tokens", "999999999"], "--shared-tokens: must be at least 0 and at most"),
        (["--port", "70000"], "--port: must be at least 0 and at most 65535"),
        (["--port", "-1"], "--port: must be at least 0 and at most 65535"),
    ],
)
def test_llm_sim_bad_flag_is_named_before_it_listens(args: list[str], message: str) -> None:
    assert message in _refused("llm_sim", "--port", "0", *args)


def test_llm_sim_port_in_use_is_named() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert f"--port {port}: cannot listen on 127.0.0.1" in _refused("llm_sim", "--port", str(port))


def test_llm_sim_bad_host_is_named() -> None:
    message = _refused("llm_sim", "--port", "0", "--host", "256.1.1.1")
    assert message.startswith("--host 256.1.1.1: not an address of this machine")
