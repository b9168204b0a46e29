"""Each mailbox's day, cap, warm-up step, next send, rates and state, in queue_stats (text and
--json), the dashboard and the admin list, scoped to the user's organizations."""

from __future__ import annotations

import json
from datetime import date, timedelta
from io import StringIO

import pytest
import redis
from django.contrib import admin
from django.core.management import call_command
from django.urls import include, path, reverse
from django.utils import timezone

from nurture.mail.sending import outreach_send
from orchestrator.budget import get_budget
from outreach.models import Mailbox, Organization, Owner, State, VerifiedDomain
from tests.factories import logged_in, make_lead, make_org, make_outreach, make_owner, make_user

urlpatterns = [path("", include("backoffice.urls")), path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]


def _world(name: str) -> tuple[Organization, Owner, Mailbox]:
    org = make_org(name=name, sender_email=f"team@{name.lower()}.example")
    VerifiedDomain.objects.create(organization=org, domain=f"{name.lower()}.example")
    owner = make_owner(organization=org, name=f"{name} Seller")
    box = Mailbox.objects.create(
        organization=org,
        address=f"box@{name.lower()}.example",
        daily_cap=40,
        ramp_from=timezone.now().date() - timedelta(days=2),  # day 3: 5 + 2 * 2 = 9
        ramp_start=5,
        ramp_step=2,
        min_spacing_s=600,
        max_spacing_s=600,
    )
    box.owners.add(owner)
    return org, owner, box


@pytest.fixture
def two(redis_client: redis.Redis) -> tuple[Organization, Organization]:
    ours, owner, _ = _world("Ours")
    theirs, _, _ = _world("Theirs")
    row = make_outreach(
        lead=make_lead(owner=owner), state=State.DISPATCHED, draft_subject="Hi", draft_body="A body."
    )
    assert outreach_send(outreach_id=row.pk, budget=get_budget()) == State.SENT
    return ours, theirs


def test_queue_stats_shows_each_mailbox_of_the_organization(two: tuple[Organization, Organization]) -> None:
    out = StringIO()
    call_command("queue_stats", "--json", "--org", "Ours", stdout=out)
    [box] = json.loads(out.getvalue())["mailboxes"]
    assert (box["address"], box["sent_today"], box["cap"], box["ramp_cap"]) == ("box@ours.example", 1, 40, 9)
    assert box["next_send_at"] is not None
    assert (box["active"], box["bounce_rate"]) == (True, 0.0)
    text = StringIO()
    call_command("queue_stats", "--org", "Ours", stdout=text)
    assert "box@ours.example" in text.getvalue()
    assert "40 (9)" in text.getvalue()
    assert "box@theirs.example" not in text.getvalue()


def test_the_dashboard_and_the_admin_list_show_a_member_their_mailboxes_only(
    two: tuple[Organization, Organization],
) -> None:
    ours, _ = two
    member = make_user("member", permissions=["view_queue_health", "view_mailbox"], organizations=[ours])
    client = logged_in(member)
    html = client.get(reverse("orchestrator:queue-health")).content.decode()
    assert "box@ours.example" in html
    assert "box@theirs.example" not in html
    listed = client.get(reverse("admin:outreach_mailbox_changelist")).content.decode()
    assert "box@ours.example" in listed
    assert "1 / 40 (9)" in listed
    assert "box@theirs.example" not in listed


def test_the_admin_refuses_an_owner_of_another_organization_and_an_unverified_domain(
    two: tuple[Organization, Organization],
) -> None:
    ours, theirs = two
    both = make_user("both", permissions=["add_mailbox", "view_mailbox"], organizations=[ours, theirs])
    stranger = Owner.objects.get(name="Theirs Seller")
    response = logged_in(both).post(
        reverse("admin:outreach_mailbox_add"),
        {
            "organization": ours.pk,
            "address": "new@elsewhere.example",
            "owners": [stranger.pk],
            "daily_cap": 40,
            "ramp_from": date.today().isoformat(),
            "ramp_start": 5,
            "ramp_step": 2,
            "min_spacing_s": 60,
            "max_spacing_s": 240,
            "active": "on",
        },
    )
    assert response.status_code == 200
    html = response.content.decode()
    assert "owners: Theirs Seller not of Ours." in html
    assert "address: elsewhere.example is not a verified domain of Ours" in html
    assert not Mailbox.objects.filter(address="new@elsewhere.example").exists()


def test_an_operator_resumes_a_paused_mailbox_of_their_organization_only(
    two: tuple[Organization, Organization],
) -> None:
    ours, _ = two
    Mailbox.objects.update(active=False, paused_reason="hard-bounce rate 7.5% over the last 40 sends > 5%")
    operator = make_user("ops", permissions=["view_mailbox", "change_mailbox"], organizations=[ours])
    ids = list(Mailbox.objects.values_list("pk", flat=True))
    response = logged_in(operator).post(
        reverse("admin:outreach_mailbox_changelist"),
        {"action": "resume_selected", "_selected_action": ids},
        follow=True,
    )
    assert response.status_code == 200
    states = dict(Mailbox.objects.values_list("address", "active"))
    assert states == {"box@ours.example": True, "box@theirs.example": False}
    resumed = Mailbox.objects.get(address="box@ours.example")
    assert (resumed.paused_reason, resumed.resumed_at is not None) == ("", True)
