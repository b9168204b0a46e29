"""A mailbox whose bounce or complaint rate crosses its threshold is paused on its own, driven by
the providers' tracking webhooks (orchestrator.controls.deliverability); the owner's other
mailboxes go on sending."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from orchestrator.models import Pause
from outreach.models import Lead, Mailbox, Owner, State, VerifiedDomain
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.nurture.mail.providers import sendgrid, sendgrid_event

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("provider_secrets")]


def _emailed_from(box: Mailbox, owner: Owner, n: int) -> list[Lead]:
    leads = [make_lead(owner=owner) for _ in range(n)]
    for lead in leads:
        make_outreach(lead=lead, state=State.SENT, sent_at=timezone.now(), mailbox=box)
    return leads


def test_a_mailbox_over_its_bounce_rate_is_paused_and_the_owner_s_other_mailbox_is_not(
    client: Client,
) -> None:
    # given an owner sending from two mailboxes, 40 emails each
    org = make_org(sender_email="team@corp.example")
    VerifiedDomain.objects.create(organization=org, domain="corp.example")
    owner = make_owner(organization=org)
    bad, good = (
        Mailbox.objects.create(organization=org, address=f"{n}@corp.example") for n in ("bad", "good")
    )
    bad.owners.add(owner)
    good.owners.add(owner)
    bad_leads = _emailed_from(bad, owner, 40)
    _emailed_from(good, owner, 40)
    # when three of the first mailbox's recipients hard-bounce (7.5 % of its sends; 3.75 % of the owner's)
    events = [sendgrid_event(lead.email, "bounce", type="bounce", status="5.1.1") for lead in bad_leads[:3]]
    assert sendgrid(client, events).status_code == 200
    # then that mailbox is paused, saying why; the other mailbox and the owner are not
    bad.refresh_from_db()
    good.refresh_from_db()
    assert (bad.active, bad.paused_reason) == (False, "hard-bounce rate 7.5% over the last 40 sends > 5%")
    assert good.active
    assert not Pause.objects.filter(owner=owner, resumed_at__isnull=True).exists()


def test_a_resumed_mailbox_is_judged_on_its_sends_since(client: Client) -> None:
    # given a mailbox paused for bounces, then resumed
    org = make_org(sender_email="team@corp.example")
    VerifiedDomain.objects.create(organization=org, domain="corp.example")
    owner = make_owner(organization=org)
    box = Mailbox.objects.create(organization=org, address="a@corp.example")
    box.owners.add(owner)
    old = _emailed_from(box, owner, 40)
    assert (
        sendgrid(client, [sendgrid_event(x.email, "bounce", type="bounce") for x in old[:3]]).status_code
        == 200
    )
    Mailbox.objects.filter(pk=box.pk).update(active=True, paused_reason="", resumed_at=timezone.now())
    # when a late bounce of an old email arrives
    assert sendgrid(client, [sendgrid_event(old[3].email, "bounce", type="bounce")]).status_code == 200
    # then it stays active: its rates start over from the resume
    box.refresh_from_db()
    assert box.active
