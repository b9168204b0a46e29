"""assign_leads: validation of every row first, bulk load, idempotent re-runs, the parent batch."""

from __future__ import annotations

import hashlib
from io import StringIO
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.core.management import CommandError, call_command

from nurture.intake.assignment import assignment_chunk_process, assignment_chunks, assignment_create
from nurture.intake.csv_file import OwnerDirectory, OwnerRef, RowError, parse_assignment_csv
from nurture.intake.tasks import intake_chunk
from outreach.idempotency import intro_key, nudge_key
from outreach.models import AssignmentBatch, AssignmentItem, Lead, Outreach, Owner, State
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db

HEADER = "email,first_name,last_name,company,title,timezone,owner\n"


@pytest.fixture
def ann() -> Owner:
    return make_owner(organization=make_org(name="Default"), name="Ann")


def _csv(tmp_path: Path, body: str, *, header: str = HEADER, name: str = "leads.csv") -> Path:
    path = tmp_path / name
    path.write_text(header + body, encoding="utf-8")
    return path


def _run(path: Path, *args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("assign_leads", str(path), "--no-progress", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _fail(path: Path, *args: str) -> tuple[str, list[str]]:
    err = StringIO()
    with pytest.raises(CommandError) as info:
        call_command("assign_leads", str(path), "--no-progress", *args, stdout=StringIO(), stderr=err)
    return str(info.value), err.getvalue().splitlines()


def _nothing_loaded() -> None:
    assert (Lead.objects.count(), Outreach.objects.count(), AssignmentBatch.objects.count()) == (0, 0, 0)


def test_good_file_loads_leads_with_intro_and_nudges(tmp_path: Path, ann: Owner) -> None:
    # given a file of three valid rows for an existing owner
    path = _csv(
        tmp_path,
        "a@x.example,Ada,Lovelace,Analytical,CTO,Europe/London,Ann\n"
        "B@X.example,Bob,,,,Asia/Tokyo,Ann\n"
        "c@x.example,Cy,Young,Acme,VP,America/New_York,Ann\n",
    )
    # when it is loaded
    out, err = _run(path)
    # then each lead exists with an intro now and two nudges later, under stable keys
    assert err == ""
    leads = {lead.email: lead for lead in Lead.objects.all()}
    assert sorted(leads) == ["a@x.example", "b@x.example", "c@x.example"]  # emails lower-cased
    assert leads["b@x.example"].timezone == "Asia/Tokyo"
    assert {lead.owner_id for lead in leads.values()} == {ann.pk}
    for lead in leads.values():
        rows = Outreach.objects.filter(lead=lead).order_by("step")
        assert [(o.kind, o.step, o.state) for o in rows] == [
            ("intro", 0, State.QUEUED),
            ("nudge", 1, State.QUEUED),
            ("nudge", 2, State.QUEUED),
        ]
        assert [o.idempotency_key for o in rows] == [
            intro_key(lead_id=lead.pk),
            nudge_key(lead_id=lead.pk, step=1),
            nudge_key(lead_id=lead.pk, step=2),
        ]
        assert rows[0].not_before < rows[1].not_before < rows[2].not_before
    # and the parent batch is completed, its children done and linked to their leads
    batch = AssignmentBatch.objects.get()
    assert (batch.status, batch.children_done, batch.children_total) == ("completed", 3, 3)
    assert (batch.leads_created, batch.leads_existing, batch.outreach_created) == (3, 0, 9)
    assert batch.completed_at is not None
    children = AssignmentItem.objects.filter(batch=batch).order_by("line")
    assert [(c.line, c.status, c.outcome, c.lead_id) for c in children] == [
        (2, "done", "new", leads["a@x.example"].pk),
        (3, "done", "new", leads["b@x.example"].pk),
        (4, "done", "new", leads["c@x.example"].pk),
    ]
    assert f"Assignment #{batch.pk} completed: 3 rows into Default: 3 new leads" in out
    assert "9 outreach queued" in out


def test_file_with_bad_rows_loads_nothing_and_reports_each_line(tmp_path: Path, ann: Owner) -> None:
    # given a file whose good rows are mixed with bad ones, including an inactive owner
    make_owner(organization=ann.organization, name="Gone", active=False)
    path = _csv(
        tmp_path,
        "good@x.example,Ada,L,Acme,CTO,Europe/Berlin,Ann\n"  # line 2
        "not-an-email,Bob,,,,Europe/Berlin,Ann\n"  # line 3
        "c@x.example,Cy,,,,Mars/Olympus,Ann\n"  # line 4
        "d@x.example,Di,,,,Europe/Berlin,Nobody\n"  # line 5
        "GOOD@x.example,Ada,L,Acme,CTO,Europe/Berlin,Ann\n"  # line 6: duplicate of line 2
        ",Eve,,,,,Ann\n"  # line 7: two empty required fields
        "f@x.example,Fay,,,,europe/berlin,Gone\n"  # line 8
        "g@x.example,Gus,,,,UTC\n",  # line 9: a value short
    )
    # when it is loaded
    message, errors = _fail(path)
    # then every bad line is reported, as the user numbers lines, and nothing was written
    assert errors == [
        "line 3: email: 'not-an-email' is not a valid email address",
        "line 4: timezone: unknown time zone 'Mars/Olympus' (use an IANA name such as Europe/Berlin)",
        "line 5: owner: unknown owner 'Nobody' "
        "(create it in the admin's Owners or with add_owner, or check the spelling)",
        "line 6: email: duplicate of line 2",
        "line 7: email: is empty",
        "line 7: timezone: is empty",
        "line 8: timezone: unknown time zone 'europe/berlin' (did you mean Europe/Berlin?)",
        "line 8: owner: owner 'Gone' is not active",
        "line 9: columns: expected 7 values, found 6",
    ]
    assert "9 problem(s) on 7 line(s): nothing was loaded" in message
    _nothing_loaded()


def test_rerun_of_the_same_file_is_a_no_op(tmp_path: Path, ann: Owner) -> None:
    # given a file already loaded once
    path = _csv(tmp_path, "a@x.example,Ada,,,,UTC,Ann\nb@x.example,Bob,,,,UTC,Ann\n")
    _run(path)
    before = (Lead.objects.count(), Outreach.objects.count(), AssignmentBatch.objects.count())
    # when it is loaded again
    out, _ = _run(path)
    # then nothing new exists, and the command says so
    assert (Lead.objects.count(), Outreach.objects.count(), AssignmentBatch.objects.count()) == before
    assert out.startswith("Nothing new: all 2 leads of leads.csv are already assigned in Default")


def test_header_missing_a_column_is_named(tmp_path: Path, ann: Owner) -> None:
    # given a file without the timezone column
    path = _csv(
        tmp_path,
        "a@x.example,Ada,L,Acme,CTO,Ann\n",
        header="email,first_name,last_name,company,title,owner\n",
    )
    # when it is loaded
    _, errors = _fail(path)
    # then the header line names the missing column and nothing was loaded
    assert errors == ["line 1: header: missing column(s): timezone"]
    _nothing_loaded()


def test_header_is_matched_loosely_and_extra_columns_are_ignored(tmp_path: Path, ann: Owner) -> None:
    # given a spreadsheet export: BOM, title-case headers in another order, an extra column
    path = tmp_path / "export.csv"
    path.write_bytes(
        "\ufeffOwner,Email,First Name,Last Name,Company,Title,Timezone,Notes\n"
        "Ann,a@x.example,Ada,L,Acme,CTO,UTC,met at a fair\n".encode()
    )
    # when it is loaded
    out, _ = _run(path)
    # then the lead is loaded and the extra column is reported as ignored
    assert Lead.objects.get().first_name == "Ada"
    assert "Ignored column(s): notes." in out


def test_line_numbers_count_quoted_values_spanning_lines(tmp_path: Path, ann: Owner) -> None:
    # given a row whose company contains a line break, followed by a bad row
    path = _csv(tmp_path, 'a@x.example,Ada,L,"Acme\nLabs",CTO,UTC,Ann\n\nbad,Bob,,,,UTC,Ann\n')
    # when it is loaded
    _, errors = _fail(path)
    # then the bad row is reported at the line an editor shows (the blank line counts, too)
    assert errors == ["line 5: email: 'bad' is not a valid email address"]


def test_file_that_is_not_utf8_is_refused_with_its_line(tmp_path: Path, ann: Owner) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes((HEADER + "a@x.example,Ad\xe9le,,,,UTC,Ann\n").encode("latin-1"))
    message, errors = _fail(path)
    assert errors == ["line 2: file: not UTF-8 text (byte 70); save the file as UTF-8"]
    assert "nothing was loaded" in message
    _nothing_loaded()


def test_header_only_file_loads_nothing_without_error(tmp_path: Path, ann: Owner) -> None:
    out, _ = _run(_csv(tmp_path, ""))
    assert "no rows: nothing to load" in out
    _nothing_loaded()


def test_owner_name_in_two_organizations_needs_org(tmp_path: Path, ann: Owner) -> None:
    # given an owner named Ann in two organizations
    other = make_owner(organization=make_org(name="Beta"), name="Ann")
    path = _csv(tmp_path, "a@x.example,Ada,,,,UTC,Ann\n")
    # when loaded without --org, then the row is refused and --org is asked for
    _, errors = _fail(path)
    assert errors == [
        "line 2: owner: owner 'Ann' exists in several organizations (Beta, Default): pass --org"
    ]
    # when loaded with --org Beta, then the lead goes to Beta's Ann
    _run(path, "--org", "Beta")
    assert Lead.objects.get().owner_id == other.pk


def test_unknown_org_is_refused(tmp_path: Path, ann: Owner) -> None:
    message, _ = _fail(_csv(tmp_path, "a@x.example,Ada,,,,UTC,Ann\n"), "--org", "Nope")
    assert message == "--org 'Nope': no such organization (known: Default)."


def test_existing_leads_are_kept_and_stopped_leads_get_nothing(tmp_path: Path, ann: Owner) -> None:
    # given a lead already assigned to Bob with its intro, and a lead that opted out
    bob = make_owner(organization=ann.organization, name="Bob")
    kept = make_lead(owner=bob, email="kept@x.example")
    make_outreach(lead=kept, idempotency_key=intro_key(lead_id=kept.pk))
    opted = make_lead(owner=bob, email="opted@x.example", status=Lead.Status.OPTED_OUT)
    path = _csv(
        tmp_path,
        "kept@x.example,K,,,,UTC,Ann\nopted@x.example,O,,,,UTC,Ann\nnew@x.example,N,,,,UTC,Ann\n",
    )
    # when the file assigns all three to Ann
    out, _ = _run(path)
    # then existing leads keep their owner, only the new lead gets a sequence
    kept.refresh_from_db()
    assert kept.owner_id == bob.pk
    assert Outreach.objects.filter(lead=kept).count() == 1
    assert not Outreach.objects.filter(lead=opted).exists()
    assert Outreach.objects.filter(lead__email="new@x.example").count() == 3
    outcomes = dict(AssignmentItem.objects.values_list("email", "outcome"))
    assert outcomes == {"kept@x.example": "existing", "opted@x.example": "stopped", "new@x.example": "new"}
    assert "1 new leads, 2 existing kept with their owners (1 replied/opted out/converted" in out


def test_fan_out_times_out_without_workers_then_children_complete_the_parent(
    tmp_path: Path, ann: Owner
) -> None:
    # given a file handed to Celery workers, and no worker running
    path = _csv(tmp_path, "a@x.example,Ada,,,,UTC,Ann\nb@x.example,Bob,,,,UTC,Ann\n")
    # when the command waits for a short time
    message, _ = _fail(path, "--fan-out", "--timeout", "0.1")
    # then it says how far it got, and the parent is parked, not failed
    batch = AssignmentBatch.objects.get()
    assert message.startswith(
        f"Timed out after 0.1 s: 0/2 leads done. Assignment #{batch.pk} completes by itself"
    )
    assert (batch.status, batch.children_done) == ("loading", 0)
    # when the chunk task runs (as a worker would call it), twice (a redelivery)
    ids = list(AssignmentItem.objects.filter(batch=batch).values_list("id", flat=True))
    [(first, last)] = assignment_chunks(child_ids=ids)
    intake_chunk(batch.pk, first, last)
    intake_chunk(batch.pk, first, last)
    # then the children completed the parent, exactly once
    batch.refresh_from_db()
    assert (batch.status, batch.children_done, batch.leads_created, batch.outreach_created) == (
        "completed",
        2,
        2,
        6,
    )
    assert Outreach.objects.count() == 6


def test_parent_completes_when_its_last_chunk_finishes(ann: Owner) -> None:
    # given a batch of five children processed in chunks of two
    directory = OwnerDirectory(owners=[OwnerRef(ann.pk, "Ann", ann.organization_id, "Default", True)])
    text = HEADER + "".join(f"l{i}@x.example,L,,,,UTC,Ann\n" for i in range(5))
    rows = parse_assignment_csv(text=text, owners=directory).rows
    batch, ids = assignment_create(
        organization_id=ann.organization_id,
        file_name="f.csv",
        file_sha256="0" * 64,
        rows=rows,
        now=ann.created_at,
    )
    chunks = assignment_chunks(child_ids=ids, size=2)
    assert len(chunks) == 3
    # when the chunks finish in any order, then the parent completes only with the last one
    for done, (first, last) in enumerate([chunks[2], chunks[0], chunks[1]], start=1):
        assignment_chunk_process(batch_id=batch.pk, first_id=first, last_id=last)
        batch.refresh_from_db()
        assert batch.status == ("completed" if done == 3 else "loading")
    assert batch.children_done == 5


# --- the parser on its own (no database) -------------------------------------------------------

DIRECTORY = OwnerDirectory(
    owners=[OwnerRef(1, "Ann", 10, "Default", True), OwnerRef(2, "ann", 10, "Default", True)]
)


def test_parser_prefers_the_exact_owner_spelling() -> None:
    parsed = parse_assignment_csv(text=HEADER + "a@x.example,,,,,UTC,ann\n", owners=DIRECTORY)
    assert [row.owner_id for row in parsed.rows] == [2]
    assert parsed.organization_id == 10


def test_parser_reports_long_values_and_nul() -> None:
    text = HEADER + f"a@x.example,{'x' * 101},L\x00,,,UTC,Ann\n"
    parsed = parse_assignment_csv(text=text, owners=DIRECTORY)
    assert parsed.errors == [
        RowError(2, "first_name", "longer than 100 characters"),
        RowError(2, "last_name", "contains a NUL character"),
    ]
    assert parsed.rows == []


def test_parser_reports_an_empty_file() -> None:
    parsed = parse_assignment_csv(text="", owners=DIRECTORY)
    assert [str(e) for e in parsed.errors] == [
        "line 1: header: the file is empty: expected email, first_name, last_name, company, title, timezone, owner"
    ]


def test_existing_lead_without_an_intro_gets_its_sequence(tmp_path: Path, ann: Owner) -> None:
    # given a lead created outside intake (e.g. in admin), with no outreach at all
    lead = make_lead(owner=ann, email="manual@x.example", timezone="Europe/Paris")
    # when a file names it
    _run(_csv(tmp_path, "manual@x.example,M,,,,UTC,Ann\n"))
    # then it gets intro + nudges, scheduled in its own time zone, and is counted as existing
    nudge = Outreach.objects.get(lead=lead, step=1)
    assert Outreach.objects.filter(lead=lead).count() == 3
    assert nudge.not_before.astimezone(ZoneInfo("Europe/Paris")).hour == 9
    assert AssignmentItem.objects.get().outcome == "existing"


def test_rerun_after_an_interrupted_load_resumes_the_same_batch(tmp_path: Path, ann: Owner) -> None:
    # given a load of three leads that died after its first chunk (one lead) was written
    path = _csv(tmp_path, "a@x.example,A,,,,UTC,Ann\nb@x.example,B,,,,UTC,Ann\nc@x.example,C,,,,UTC,Ann\n")
    directory = OwnerDirectory(owners=[OwnerRef(ann.pk, "Ann", ann.organization_id, "Default", True)])
    rows = parse_assignment_csv(text=path.read_text(), owners=directory).rows
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    batch, ids = assignment_create(
        organization_id=ann.organization_id,
        file_name=str(path),
        file_sha256=sha256,
        rows=rows,
        now=ann.created_at,
    )
    first, last = assignment_chunks(child_ids=ids, size=1)[0]
    assignment_chunk_process(batch_id=batch.pk, first_id=first, last_id=last)
    # when the file is run again
    out, _ = _run(path)
    # then the same batch is finished, with no second batch and no duplicate work
    assert out.startswith(f"Resuming assignment #{batch.pk}: 2 of 3 leads left.")
    batch.refresh_from_db()
    assert (batch.status, batch.children_done, batch.leads_created, batch.outreach_created) == (
        "completed",
        3,
        3,
        9,
    )
    assert (AssignmentBatch.objects.count(), Outreach.objects.count()) == (1, 9)


@pytest.mark.parametrize("status", [Lead.Status.OPTED_OUT, Lead.Status.BOUNCED, Lead.Status.COMPLAINED])
def test_a_suppressed_address_imported_again_stays_suppressed(
    tmp_path: Path, ann: Owner, status: Lead.Status
) -> None:
    # given a lead who opted out, bounced or complained
    gone = make_lead(owner=ann, email="gone@x.example", status=status)
    # when a file names the address again, typed differently, with new details
    out, _ = _run(_csv(tmp_path, "GONE@X.example,Newname,,,,UTC,Ann\n"))
    # then it is the same lead, still suppressed, and nothing is queued for it
    assert list(Lead.objects.values_list("pk", "status", "first_name")) == [(gone.pk, status, "Pat")]
    assert not Outreach.objects.exists()
    assert "Nothing new: all 1 leads of leads.csv are already assigned" in out
