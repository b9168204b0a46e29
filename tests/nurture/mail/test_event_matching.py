"""A provider's tracking event belongs to the email it is about (nurture.mail.events): matched
by the provider's message id, then by our Message-ID where the provider reports the message's
headers, then by address within the one organization that emailed it. A hard bounce suppresses
the address in every organization; a complaint only the lead of the organization that mailed it.

The address of these tests is a lead of two organizations: A emailed it first, B later (so
"whoever emailed it last", the old rule, would pick B)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from outreach.models import Lead, LeadEvent, Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.nurture.mail.providers import mailgun, postmark, postmark_bounce, sendgrid, sendgrid_event

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("provider_secrets")]

ADDRESS = "pat@prospect.example"


@dataclass(frozen=True)
class Tenant:
    lead: Lead
    email: Outreach  # the email sent to the lead
    nudge: Outreach  # its next step, queued


def _tenant(*, esp_message_id: str, message_id: str, sent_ago: timedelta, email: str = ADDRESS) -> Tenant:
    """A lead at `email` in an organization of its own, sent one email `sent_ago`, a nudge queued."""
    lead = make_lead(owner=make_owner(organization=make_org()), email=email)
    when = timezone.now() - sent_ago
    sent = make_outreach(
        lead=lead,
        state=State.SENT,
        sent_at=when,
        state_changed_at=when,
        message_id=message_id,
        esp_message_id=esp_message_id,
    )
    nudge = make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=1)
    return Tenant(lead, sent, nudge)


@pytest.fixture
def a() -> Tenant:
    return _tenant(
        esp_message_id="a1b2-esp-a", message_id="<outreach-a.7f3e@mail.a.example>", sent_ago=timedelta(days=2)
    )


@pytest.fixture
def b() -> Tenant:
    return _tenant(
        esp_message_id="c3d4-esp-b",
        message_id="<outreach-b.9c1d@mail.b.example>",
        sent_ago=timedelta(hours=1),
    )


def _status(tenant: Tenant) -> str:
    return Lead.objects.get(pk=tenant.lead.pk).status


def _state(row: Outreach) -> str:
    return Outreach.objects.get(pk=row.pk).state


def _complaint(client: Client, provider: str, *, esp_id: str = "", header_id: str = "") -> int:
    """A complaint about the email the provider knows as `esp_id` (and whose Message-ID header
    the provider reports as `header_id`), each provider's documented shape."""
    if provider == "sendgrid":
        ids = {"anymail_id": esp_id} if esp_id else {}
        ids |= {"smtp-id": header_id} if header_id else {}
        return sendgrid(client, [sendgrid_event(ADDRESS, "spamreport", **ids)]).status_code
    if provider == "mailgun":
        # Mailgun names the message by its Message-ID header, the id its send API answered.
        message = (
            {"headers": {"message-id": (esp_id or header_id).strip("<>")}} if esp_id or header_id else {}
        )
        return mailgun(client, {"event": "complained", "recipient": ADDRESS, "message": message}).status_code
    event = postmark_bounce(ADDRESS, "SpamComplaint", message_id=esp_id)
    return postmark(client, event).status_code


# --- complaints: the organization that mailed it -------------------------------------------------


@pytest.mark.parametrize("provider", ["sendgrid", "mailgun", "postmark"])
def test_a_complaint_about_one_organizations_email_complains_only_its_lead(
    client: Client, a: Tenant, b: Tenant, provider: str
) -> None:
    # given A's email was sent through the provider as a1b2-esp-a (Mailgun's ids are Message-IDs)
    esp_id = "<20261123.a1b2@mg.a.example>" if provider == "mailgun" else "a1b2-esp-a"
    Outreach.objects.filter(pk=a.email.pk).update(esp_message_id=esp_id)
    # when the provider reports a complaint about that email (B emailed the address later)
    assert _complaint(client, provider, esp_id=esp_id) == 200
    # then A's lead complained and its nudge is cancelled; B keeps mailing the person
    assert (_status(a), _state(a.nudge)) == (Lead.Status.COMPLAINED, State.CANCELLED)
    assert (_status(b), _state(b.nudge)) == (Lead.Status.ACTIVE, State.QUEUED)


def test_an_email_with_several_provider_ids_is_found_by_any_of_them(
    client: Client, a: Tenant, b: Tenant
) -> None:
    # given the provider answered A's send with a set of ids (stored space-separated)
    Outreach.objects.filter(pk=a.email.pk).update(esp_message_id="0f9e-first a1b2-second")
    # when a complaint names the second
    assert _complaint(client, "sendgrid", esp_id="a1b2-second") == 200
    # then it is A's email
    assert (_status(a), _status(b)) == (Lead.Status.COMPLAINED, Lead.Status.ACTIVE)


@pytest.mark.parametrize("provider", ["sendgrid", "mailgun"])
def test_a_complaint_is_matched_by_our_message_id_where_the_provider_reports_it(
    client: Client, a: Tenant, b: Tenant, provider: str
) -> None:
    # given the provider's id for A's email is unknown to us (e.g. recorded before the id was
    # stored), but the provider reports the email's Message-ID header: SendGrid's smtp-id,
    # Mailgun's message.headers.message-id
    Outreach.objects.filter(pk=a.email.pk).update(esp_message_id="")
    # when it reports a complaint naming A's Message-ID
    assert _complaint(client, provider, header_id=a.email.message_id) == 200
    # then it is A's email
    assert (_status(a), _status(b)) == (Lead.Status.COMPLAINED, Lead.Status.ACTIVE)


def test_an_address_only_one_organization_emailed_is_matched_by_address(client: Client, a: Tenant) -> None:
    # given B has the address as a lead but never emailed it
    other = make_lead(owner=make_owner(organization=make_org()), email=ADDRESS)
    # when a complaint names no email we know
    assert _complaint(client, "sendgrid", esp_id="not-one-of-ours") == 200
    # then the organization that emailed the address has it
    assert Lead.objects.get(pk=other.pk).status == Lead.Status.ACTIVE
    assert _status(a) == Lead.Status.COMPLAINED


def test_a_complaint_that_names_no_email_of_several_organizations_is_not_guessed(
    client: Client, a: Tenant, b: Tenant, caplog: Any
) -> None:
    # when a complaint arrives for the address both organizations emailed, naming nothing we know
    with caplog.at_level(logging.WARNING, logger="nurture.mail.events"):
        assert _complaint(client, "sendgrid", esp_id="not-one-of-ours") == 200
    # then no lead is touched, and the log says why
    assert (_status(a), _status(b)) == (Lead.Status.ACTIVE, Lead.Status.ACTIVE)
    assert (_state(a.nudge), _state(b.nudge)) == (State.QUEUED, State.QUEUED)
    assert "2 organizations emailed it" in caplog.text


# --- hard bounces: the address, everywhere ---------------------------------------------------------


def test_a_hard_bounce_of_one_organizations_email_bounces_the_address_everywhere(
    client: Client, a: Tenant, b: Tenant
) -> None:
    # given a third organization has the address as a lead it has not emailed yet
    unmailed = make_lead(owner=make_owner(organization=make_org()), email=ADDRESS.upper())
    queued = make_outreach(lead=unmailed)
    # when Postmark reports a hard bounce of A's email
    assert (
        postmark(client, postmark_bounce(ADDRESS, "HardBounce", message_id="a1b2-esp-a")).status_code == 200
    )
    # then the mailbox does not exist, for anyone: every lead at it bounced, its work cancelled
    assert [_status(a), _status(b), Lead.objects.get(pk=unmailed.pk).status] == [Lead.Status.BOUNCED] * 3
    assert [_state(a.nudge), _state(b.nudge), _state(queued)] == [State.CANCELLED] * 3


def test_a_hard_bounce_that_names_no_email_still_bounces_the_address_everywhere(
    client: Client, a: Tenant, b: Tenant
) -> None:
    event = sendgrid_event(ADDRESS, "bounce", type="bounce", reason="550 5.1.1 no such user")
    assert sendgrid(client, [event]).status_code == 200
    assert (_status(a), _status(b)) == (Lead.Status.BOUNCED, Lead.Status.BOUNCED)


def test_a_complaint_after_a_bounce_stays_with_its_organization(client: Client, a: Tenant, b: Tenant) -> None:
    # given the address bounced (both leads bounced)
    assert (
        postmark(client, postmark_bounce(ADDRESS, "HardBounce", message_id="c3d4-esp-b")).status_code == 200
    )
    # when a complaint about A's email follows
    assert _complaint(client, "postmark", esp_id="a1b2-esp-a") == 200
    # then A's lead complained (a complaint outranks a bounce), B's stays bounced
    assert (_status(a), _status(b)) == (Lead.Status.COMPLAINED, Lead.Status.BOUNCED)
    # and each lead's history says what happened, in order
    history = LeadEvent.objects.filter(lead=a.lead).order_by("at", "id")
    assert [(e.from_status, e.to_status) for e in history] == [
        (Lead.Status.ACTIVE, Lead.Status.BOUNCED),
        (Lead.Status.BOUNCED, Lead.Status.COMPLAINED),
    ]
    assert "hard bounce reported by Postmark" in history[0].note


def test_an_event_for_an_address_nobody_emailed_changes_nothing(client: Client) -> None:
    lead = make_lead(email="never@prospect.example")
    event = sendgrid_event("never@prospect.example", "bounce", type="bounce")
    assert sendgrid(client, [event]).status_code == 200
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.ACTIVE
