"""Per owner, today's sent and committed (drafts included) against its limit, and its working days
as weekday names: in the owner admin list, the dashboard and queue_stats (issue 27)."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from outreach.models import Owner, State, working_days_text
from tests.factories import logged_in, make_lead, make_org, make_outreach, make_owner, make_user

OWNERS = reverse("admin:outreach_owner_changelist")
DASHBOARD = reverse("orchestrator:queue-health")


@pytest.mark.parametrize(
    ("days", "text"),
    [
        ("12345", "Mon-Fri"),
        ("135", "Mon, Wed, Fri"),
        ("1234567", "Mon-Sun"),
        ("67", "Sat, Sun"),
        ("12456", "Mon, Tue, Thu-Sat"),
        ("", "none"),
    ],
)
def test_working_days_read_as_weekday_names(days: str, text: str) -> None:
    assert working_days_text(days) == text


def _seller(org_name: str = "Acme") -> Owner:
    """A seller (limit 20, Mon-Fri) with today 1 sent, 1 in flight and 3 drafts: 5 committed."""
    seller = make_owner(
        organization=make_org(name=org_name), name="Sam", daily_limit=20, working_days="12345"
    )
    make_outreach(lead=make_lead(owner=seller), state=State.SENT, sent_at=timezone.now())
    make_outreach(lead=make_lead(owner=seller), state=State.GENERATING)
    for state in (State.AWAITING_APPROVAL, State.AWAITING_APPROVAL, State.APPROVED):
        make_outreach(lead=make_lead(owner=seller), state=state)
    make_outreach(lead=make_lead(owner=seller))  # queued: not committed
    return seller


@pytest.mark.django_db
def test_the_owner_list_shows_today_against_the_limit_and_weekday_names() -> None:
    # given a seller of Acme, and an operator of Acme
    seller = _seller()
    user = make_user("op", permissions=("view_owner",), organizations=[seller.organization])
    # when the operator opens the owner list
    page = logged_in(user).get(OWNERS).content.decode()
    # then it shows sent / committed / limit, and "Mon-Fri", not "12345"
    assert "1 / 5 / 20" in page
    assert "Mon-Fri" in page
    assert ">12345<" not in page


@pytest.mark.django_db
def test_queue_stats_and_the_dashboard_show_today_per_owner() -> None:
    # given a seller with 1 sent and 5 committed today, and another organization's owner
    _seller()
    make_owner(organization=make_org(name="Other"), name="Olga")
    # when queue_stats prints JSON, scoped to Acme
    out = io.StringIO()
    call_command("queue_stats", "--json", "--org", "Acme", stdout=out)
    owners = json.loads(out.getvalue())["owners"]
    # then the seller's row says so, and only Acme's owners are listed
    assert [
        (o["name"], o["sent_today"], o["committed_today"], o["drafts"], o["daily_limit"]) for o in owners
    ] == [("Sam", 1, 5, 3, 20)]
    assert owners[0]["working_days"] == "Mon-Fri"
    # and the text table too
    out = io.StringIO()
    call_command("queue_stats", "--org", "Acme", stdout=out)
    assert "1 / 5 / 20" in out.getvalue()
    assert "Mon-Fri" in out.getvalue()
    # and the dashboard of a member of Acme
    member = make_user(
        "member",
        permissions=("view_queue_health",),
        organizations=[Owner.objects.get(name="Sam").organization],
    )
    page = logged_in(member).get(DASHBOARD).content.decode()
    assert "1 / 5 / 20" in page
    assert "Olga" not in page
