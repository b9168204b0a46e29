"""CSV export of the changelists (backoffice.csv_export): formula cells neutralised, exactly the
rows the user's list shows (its filter and search, all pages, its organizations only), streamed,
and only for users who may view the model."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.http import StreamingHttpResponse
from django.urls import reverse

from backoffice.csv_export import cell_neutralise, csv_lines
from orchestrator.failures.dead_letters import dead_letter
from outreach.models import ErrorClass, Lead, State
from tests.factories import logged_in, make_draft, make_lead, make_org, make_outreach, make_owner, make_user

LEADS_EXPORT = reverse("admin:outreach_lead_export")
OUTREACH_EXPORT = reverse("admin:outreach_outreach_export")
DEAD_LETTERS_EXPORT = reverse("admin:orchestrator_deadletter_export")


# Written out by hand (OWASP "CSV Injection"): each trigger gets a quote; anything else, and
# every non-text value, passes unchanged.
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('=HYPERLINK("http://evil.example","x")', '\'=HYPERLINK("http://evil.example","x")'),
        ("+1+1", "'+1+1"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1:A2)", "'@SUM(A1:A2)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("Acme = good", "Acme = good"),
        ("pat@acme.example", "pat@acme.example"),
        ("", ""),
        (-5, -5),
        (None, None),
    ],
)
def test_cells_that_would_start_a_formula_get_a_leading_quote(value: object, expected: object) -> None:
    assert cell_neutralise(value) == expected


def test_csv_lines_neutralise_every_text_cell_and_quote_as_csv() -> None:
    # given a row with a hostile company and a comma in a name
    rows = [(1, "=cmd|' /C calc'!A0", "Lee, Pat", None)]
    # when it is written
    text = "".join(csv_lines(header=("id", "company", "name", "sent_at"), rows=rows))
    # then the formula is text and the comma stays inside its cell
    assert list(csv.reader(io.StringIO(text))) == [
        ["id", "company", "name", "sent_at"],
        ["1", "'=cmd|' /C calc'!A0", "Lee, Pat", ""],
    ]


def _read(response: Any) -> list[dict[str, str]]:
    assert isinstance(response, StreamingHttpResponse)  # never built in memory
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    text = b"".join(response).decode()
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.django_db
def test_lead_export_holds_the_filtered_rows_of_all_pages_and_neutralises_them() -> None:
    # given 105 active leads (more than one changelist page of 100), one hostile, and a converted one
    org = make_org()
    owner = make_owner(organization=org)
    for _ in range(104):
        make_lead(owner=owner)
    make_lead(owner=owner, company="=1+1")
    make_lead(owner=owner, status=Lead.Status.CONVERTED)
    viewer = make_user(permissions=["view_lead"], organizations=[org])
    # when they export the list filtered to active leads
    rows = _read(logged_in(viewer).get(LEADS_EXPORT, {"status__exact": "active"}))
    # then every active lead is in the file, the converted one is not, and the formula is text
    assert len(rows) == 105
    assert {row["status"] for row in rows} == {"active"}
    assert [row["company"] for row in rows if row["company"] != "Acme"] == ["'=1+1"]


@pytest.mark.django_db
def test_outreach_export_follows_the_search() -> None:
    # given two outreach, one to a searched address
    org = make_org()
    owner = make_owner(organization=org)
    make_outreach(lead=make_lead(owner=owner, email="wanted@prospect.example"))
    make_outreach(lead=make_lead(owner=owner))
    viewer = make_user(permissions=["view_outreach"], organizations=[org])
    # when they export the list searched for that address
    rows = _read(logged_in(viewer).get(OUTREACH_EXPORT, {"q": "wanted@"}))
    # then only that outreach is exported
    assert [row["lead__email"] for row in rows] == ["wanted@prospect.example"]


@pytest.mark.django_db
def test_a_member_of_another_organization_cannot_export_its_rows() -> None:
    # given leads, outreach and a dead letter in organization A and a viewer of organization B
    org_a, org_b = make_org(name="A"), make_org(name="B")
    lead_a = make_lead(owner=make_owner(organization=org_a), email="secret@a.example")
    outreach_a = make_outreach(lead=lead_a, state=State.SENDING)
    dead_letter(
        outreach=outreach_a,
        from_=State.SENDING,
        job_type="send",
        failure_class=ErrorClass.PERMANENT,
        reason="A's reason",
    )
    make_lead(owner=make_owner(organization=org_b), email="ours@b.example")
    permissions = ["view_lead", "view_outreach", "view_deadletter"]
    client = logged_in(make_user(permissions=permissions, organizations=[org_b]))
    # when they export each list, also naming A in a filter
    leads = _read(client.get(LEADS_EXPORT))
    outreach = _read(client.get(OUTREACH_EXPORT))
    letters = _read(client.get(DEAD_LETTERS_EXPORT))
    forged = client.get(LEADS_EXPORT, {"owner__organization__id__exact": org_a.pk})
    # then none of A's rows is in any file
    assert [row["email"] for row in leads] == ["ours@b.example"]
    assert outreach == []
    assert letters == []
    # (a filter with one choice is not drawn, so Django ignores it: the list, and the file, show B's)
    assert [row["email"] for row in _read(forged)] == ["ours@b.example"]


@pytest.mark.django_db
def test_export_needs_view_permission_on_the_model() -> None:
    # given staff of the organization who may view leads but not outreach
    org = make_org()
    make_draft(lead=make_lead(owner=make_owner(organization=org)))
    client = logged_in(make_user(permissions=["view_lead"], organizations=[org]))
    # when they ask for the outreach export
    response = client.get(OUTREACH_EXPORT)
    # then it is refused
    assert response.status_code == 403


@pytest.mark.django_db
def test_the_changelist_offers_the_export_with_its_current_filters() -> None:
    # given a viewer of leads
    org = make_org()
    client = logged_in(make_user(permissions=["view_lead"], organizations=[org]))
    # when they open the list filtered by status
    page = client.get(reverse("admin:outreach_lead_changelist"), {"status__exact": "active"}).content.decode()
    # then the export link carries that filter
    assert f'href="{LEADS_EXPORT}?status__exact=active"' in page
