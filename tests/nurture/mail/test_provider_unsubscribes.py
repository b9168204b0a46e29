"""A provider's `unsubscribed` tracking event opts the lead out in the organization whose email
it is about (nurture.mail.events), each provider's documented payload over the real endpoint:
SendGrid's unsubscribe and group_unsubscribe, Mailgun's unsubscribed, Postmark's
SubscriptionChange with SuppressSending true."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from orchestrator.models import Pause
from outreach.models import Lead, LeadEvent, Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.nurture.mail.providers import (
    mailgun,
    postmark,
    postmark_subscription_change,
    sendgrid,
    sendgrid_event,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("provider_secrets")]

ADDRESS = "sam@prospect.example"


def _emailed(*, esp_message_id: str, ago: timedelta) -> tuple[Lead, Outreach]:
    """A lead at ADDRESS in an organization of its own, sent one email `ago`, a nudge queued."""
    lead = make_lead(owner=make_owner(organization=make_org()), email=ADDRESS)
    when = timezone.now() - ago
    make_outreach(
        lead=lead, state=State.SENT, sent_at=when, state_changed_at=when, esp_message_id=esp_message_id
    )
    return lead, make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=1)


def _unsubscribe(client: Client, kind: str, esp_id: str) -> int:
    """Each provider's unsubscribe event about the email it knows as `esp_id`."""
    if kind == "sendgrid unsubscribe":
        return sendgrid(client, [sendgrid_event(ADDRESS, "unsubscribe", anymail_id=esp_id)]).status_code
    if kind == "sendgrid group_unsubscribe":
        event = sendgrid_event(
            ADDRESS,
            "group_unsubscribe",
            anymail_id=esp_id,
            asm_group_id=10,
            useragent="Mozilla/5.0",
            ip="203.0.113.7",
            url="https://u.sendgrid.example/unsubscribe",
        )
        return sendgrid(client, [event]).status_code
    if kind == "mailgun unsubscribed":
        event_data = {
            "event": "unsubscribed",
            "recipient": ADDRESS,
            "message": {"headers": {"message-id": esp_id.strip("<>")}},
            "client-info": {"client-type": "browser", "user-agent": "Mozilla/5.0"},
        }
        return mailgun(client, event_data).status_code
    return postmark(client, postmark_subscription_change(ADDRESS, message_id=esp_id)).status_code


@pytest.mark.parametrize(
    "kind",
    [
        "sendgrid unsubscribe",
        "sendgrid group_unsubscribe",
        "mailgun unsubscribed",
        "postmark SubscriptionChange",
    ],
)
def test_an_unsubscribe_opts_out_the_lead_of_the_organization_that_mailed_it(
    client: Client, kind: str
) -> None:
    # given the address is a lead of A (emailed first) and of B (emailed later)
    esp_id = "<20261123.a1b2@mg.a.example>" if kind.startswith("mailgun") else "a1b2-esp-a"
    a, a_nudge = _emailed(esp_message_id=esp_id, ago=timedelta(days=2))
    b, b_nudge = _emailed(esp_message_id="c3d4-esp-b", ago=timedelta(hours=1))
    # when the provider reports that the person unsubscribed from A's email
    assert _unsubscribe(client, kind, esp_id) == 200
    # then A's lead is opted out and its nudge cancelled; B's conversation goes on
    assert Lead.objects.get(pk=a.pk).status == Lead.Status.OPTED_OUT
    assert Outreach.objects.get(pk=a_nudge.pk).state == State.CANCELLED
    assert Lead.objects.get(pk=b.pk).status == Lead.Status.ACTIVE
    assert Outreach.objects.get(pk=b_nudge.pk).state == State.QUEUED
    # and an opt-out is no deliverability problem: nothing is paused
    assert not Pause.objects.exists()
    # and A's history says who reported it
    (event,) = LeadEvent.objects.filter(lead=a)
    assert (event.from_status, event.to_status) == (Lead.Status.ACTIVE, Lead.Status.OPTED_OUT)
    assert "unsubscribe" in event.note.lower()
    assert kind.split()[0] in event.note.lower()


def test_a_postmark_resubscribe_changes_nothing(client: Client) -> None:
    lead, _ = _emailed(esp_message_id="a1b2-esp-a", ago=timedelta(hours=1))
    event = postmark_subscription_change(ADDRESS, message_id="a1b2-esp-a", suppress=False)
    assert postmark(client, event).status_code == 200
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.ACTIVE


def test_an_unsubscribe_keeps_a_bounced_or_complained_lead_so(client: Client, caplog: Any) -> None:
    # given the lead complained before
    lead, _ = _emailed(esp_message_id="a1b2-esp-a", ago=timedelta(hours=1))
    Lead.objects.filter(pk=lead.pk).update(status=Lead.Status.COMPLAINED)
    # when it also unsubscribes
    assert _unsubscribe(client, "sendgrid unsubscribe", "a1b2-esp-a") == 200
    # then it stays complained (it counts in its owner's rates)
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.COMPLAINED


def test_an_unsubscribe_naming_no_email_of_several_organizations_is_not_guessed(client: Client) -> None:
    a, _ = _emailed(esp_message_id="a1b2-esp-a", ago=timedelta(days=2))
    b, _ = _emailed(esp_message_id="c3d4-esp-b", ago=timedelta(hours=1))
    assert _unsubscribe(client, "sendgrid unsubscribe", "not-one-of-ours") == 200
    assert [Lead.objects.get(pk=x.pk).status for x in (a, b)] == [Lead.Status.ACTIVE] * 2
