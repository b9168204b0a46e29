"""Unverified inbound in the admin (backoffice/admin/inbound.py): an organization's operators
read what was held; only those with `accept_unverifiedinbound` accept it as the lead's reply,
which runs the normal reply intake; another organization's operators neither see nor accept it.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from outreach.models import Lead, Organization, Outreach, State, UnverifiedInbound
from tests.factories import logged_in, make_lead, make_org, make_outreach, make_owner, make_user
from tests.nurture.intake.test_inbound_trust import post, postmark

pytestmark = pytest.mark.django_db

LIST = "admin:outreach_unverifiedinbound_changelist"
OURS = "<5f1c0ffee0ddba11c0ffee0ddba11abc@seller-a.example>"
VIEW = "view_unverifiedinbound"
ACCEPT = "accept_unverifiedinbound"


@pytest.fixture
def held(client: Client) -> UnverifiedInbound:
    """Org A's lead emailed (its nudge still waiting); someone else answered that thread."""
    lead = make_lead(owner=make_owner(organization=make_org(name="Org A")), email="pat@prospect.example")
    make_outreach(lead=lead, state=State.SENT, sent_at=timezone.now(), message_id=OURS)
    make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=1, not_before=timezone.now())
    payload = postmark(sender="pat.assistant@prospect.example", in_reply_to=OURS, references=OURS)
    assert post(client, payload).status_code == 200
    return UnverifiedInbound.objects.get()


def org_a() -> Organization:
    return Organization.objects.get(name="Org A")


def operator(organization: Organization, *permissions: str) -> User:
    return make_user(permissions=permissions, organizations=[organization])


def accept(client: Client, row: UnverifiedInbound) -> Any:
    return client.post(
        reverse(LIST), {"action": "accept_selected", "_selected_action": [row.pk]}, follow=True
    )


def test_an_operator_with_the_permission_accepts_it_and_the_normal_intake_runs(
    held: UnverifiedInbound,
) -> None:
    # given an operator of A who may view and accept
    user = operator(org_a(), VIEW, ACCEPT)
    client = logged_in(user)
    assert "pat.assistant@prospect.example" in client.get(reverse(LIST)).content.decode()
    # when they accept it
    response = accept(client, held)
    # then it is the lead's reply: queued, the sequence stopped, and who did it recorded
    assert "1 accepted as the lead&#x27;s reply." in response.content.decode()
    reply = Outreach.objects.get(kind=Outreach.Kind.REPLY)
    assert (reply.lead_id, reply.state, reply.in_reply_to) == (held.lead_id, State.QUEUED, held.message_id)
    assert reply.context["inbound"]["body"] == "Please send the contract to my new address."
    assert Outreach.objects.get(kind=Outreach.Kind.NUDGE).state == State.CANCELLED
    assert Lead.objects.get().status == Lead.Status.REPLIED
    held.refresh_from_db()
    assert (held.status, held.accepted_by, held.outreach_id) == ("accepted", user, reply.pk)
    assert held.accepted_at is not None
    # and accepting again changes nothing
    assert "0 accepted as the lead&#x27;s reply; 1 skipped: #" in accept(client, held).content.decode()
    assert Outreach.objects.filter(kind=Outreach.Kind.REPLY).count() == 1


def test_without_the_permission_it_can_be_read_but_not_accepted(held: UnverifiedInbound) -> None:
    client = logged_in(operator(org_a(), VIEW))
    page = client.get(reverse(LIST)).content.decode()
    assert "pat.assistant@prospect.example" in page
    assert "accept_selected" not in page

    response = client.post(reverse(LIST), {"action": "accept_selected", "_selected_action": [held.pk]})

    assert response.status_code == 403
    assert not Outreach.objects.filter(kind=Outreach.Kind.REPLY).exists()
    assert UnverifiedInbound.objects.get().status == "held"


def test_another_organizations_operator_neither_sees_nor_accepts_it(held: UnverifiedInbound) -> None:
    client = logged_in(operator(make_org(name="Org B"), VIEW, ACCEPT))

    assert "pat.assistant" not in client.get(reverse(LIST)).content.decode()
    change = reverse("admin:outreach_unverifiedinbound_change", args=[held.pk])
    assert client.get(change).status_code == 404
    accept(client, held)

    assert not Outreach.objects.filter(kind=Outreach.Kind.REPLY).exists()
    assert UnverifiedInbound.objects.get().status == "held"


def test_it_is_read_only(held: UnverifiedInbound) -> None:
    client = logged_in(operator(org_a(), VIEW, ACCEPT, "change_unverifiedinbound", "add_unverifiedinbound"))
    change = reverse("admin:outreach_unverifiedinbound_change", args=[held.pk])

    client.post(change, {"sender": "lead@prospect.example", "reason": "spam", "status": "accepted"})

    assert client.get(reverse("admin:outreach_unverifiedinbound_add")).status_code == 403
    assert UnverifiedInbound.objects.values_list("sender", "status").get() == (
        "pat.assistant@prospect.example",
        "held",
    )


def test_a_row_of_no_organization_shows_to_superusers_only(held: UnverifiedInbound) -> None:
    UnverifiedInbound.objects.filter(pk=held.pk).update(organization=None, lead=None)
    member = logged_in(operator(org_a(), VIEW, ACCEPT))
    superuser = logged_in(make_user(superuser=True))

    assert "pat.assistant" not in member.get(reverse(LIST)).content.decode()
    assert "pat.assistant" in superuser.get(reverse(LIST)).content.decode()
    # and with no claimed lead there is nothing to accept it for
    assert "names no lead" in accept(superuser, held).content.decode()


def test_accepting_a_held_stop_request_opts_the_lead_out_unanswered(client: Client, db: None) -> None:
    # given a lead's "remove me" that named no thread of ours (held: no conversation)
    lead = make_lead(owner=make_owner(organization=make_org(name="Org A")), email="pat@prospect.example")
    make_outreach(lead=lead, state=State.SENT, sent_at=timezone.now(), message_id=OURS)
    payload = postmark() | {"TextBody": "Please remove me from your list.", "StrippedTextReply": ""}
    assert post(client, payload).status_code == 200
    held = UnverifiedInbound.objects.get()
    assert (held.reason, Lead.objects.get().status) == ("no_conversation", Lead.Status.ACTIVE)
    # when an operator accepts it
    accept(logged_in(operator(org_a(), VIEW, ACCEPT)), held)
    # then the normal intake read it as a stop: opted out, the reply recorded and not answered
    assert Lead.objects.get().status == Lead.Status.OPTED_OUT
    assert Outreach.objects.get(kind=Outreach.Kind.REPLY).state == State.CANCELLED
