"""Automatic pauses on a sender domain that several organizations send from pause the offending
organization on it, not every tenant (orchestrator.controls.deliverability), driven by the
providers' bounce webhooks; a tenant's operator resumes their own, and the old bounces that
paused it do not pause it again at once."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from devtools.smtp_sink import SMTPSink
from nurture.mail.sending import outreach_send
from orchestrator.controls.deliverability import deliverability
from orchestrator.controls.pauses import blocking
from orchestrator.models import Pause
from outreach.models import Lead, Outreach, State
from tests.factories import logged_in, make_draft, make_lead, make_org, make_owner, make_user
from tests.nurture.mail.providers import emailed, postmark, postmark_bounce, sendgrid, sendgrid_event

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("provider_secrets")]

PAUSES = reverse("admin:orchestrator_pause_changelist")


def _bounces(client: Client, leads: list[Lead]) -> None:
    """SendGrid posts its events in batches: one POST with a hard bounce for each lead."""
    events = [
        sendgrid_event(lead.email, "bounce", type="bounce", reason="550 5.1.1 no such user", status="5.1.1")
        for lead in leads
    ]
    assert sendgrid(client, events).status_code == 200


def _active() -> set[tuple[Any, ...]]:
    rows = Pause.objects.filter(resumed_at__isnull=True)
    return {(p.organization_id, p.owner_id, p.sender_domain, p.source) for p in rows}


def test_twelve_bounces_by_one_tenant_on_a_shared_domain_pause_that_tenant_only(
    client: Client, smtp_sink: SMTPSink
) -> None:
    # given two organizations sending from shared.example: A (an owner with 150 emails sent,
    # another with 20 and a draft on its way) and B (10 sent, a draft on its way)
    a = make_org(name="A", sender_email="sales@shared.example")
    bulk, careful = make_owner(organization=a), make_owner(organization=a)
    b = make_org(name="B", sender_email="team@shared.example")
    theirs = make_owner(organization=b)
    bulk_leads = emailed(bulk, 150)
    emailed(careful, 20)
    emailed(theirs, 10)
    a_draft = make_draft(lead=make_lead(owner=careful), state=State.DISPATCHED)
    b_draft = make_draft(lead=make_lead(owner=theirs), state=State.DISPATCHED)
    # when twelve of A's addresses hard-bounce (12 of A's 170 sends: 7.1 %)
    _bounces(client, bulk_leads[:12])
    # then A is paused on the domain (and its bulk owner on its own), not the domain as a whole
    assert _active() == {
        (a.pk, bulk.pk, "", Pause.Source.BOUNCES),
        (a.pk, None, "shared.example", Pause.Source.BOUNCES),
    }
    domain_pause = Pause.objects.get(organization=a, owner=None)
    # paused at the ninth bounce: 9 of 170 (5.3 %) is the first rate over 5 %
    assert domain_pause.reason == "hard-bounce rate 5.3% over the last 170 sends > 5%"
    # and the dispatcher leaves A's owners out, B's in
    assert set(blocking(owner_ids=[careful.pk, theirs.pk]).owners) == {careful.pk}
    # and a send already handed to the workers goes out for B, and waits for A
    assert outreach_send(outreach_id=b_draft.pk) == State.SENT
    assert outreach_send(outreach_id=a_draft.pk) == State.APPROVED
    assert [m.rcpt_tos for m in smtp_sink.messages] == [[b_draft.lead.email]]
    # and the dashboard still counts the domain over every tenant (180 sends and B's new one),
    # and a member of B sees no bounce of A
    assert [(r.name, r.sends, r.bounced) for r in deliverability().domains] == [("shared.example", 181, 12)]
    assert deliverability(organization_ids=[b.pk]).domains == []


def test_a_domain_only_one_organization_sends_from_is_paused_whole(client: Client) -> None:
    # given one organization on own.example (another elsewhere)
    org = make_org(sender_email="sales@own.example")
    make_org(sender_email="x@elsewhere.example")
    owner = make_owner(organization=org)
    leads = emailed(owner, 40)
    # when three of its addresses hard-bounce (7.5 %)
    _bounces(client, leads[:3])
    # then the domain itself is paused, for whoever sends from it
    assert (None, None, "own.example", Pause.Source.BOUNCES) in _active()


def test_a_tenant_operator_resumes_their_pause_and_old_bounces_do_not_pause_it_again(client: Client) -> None:
    # given A and B on shared.example; A's owner sent 40 emails, 3 of which bounce (7.5 %)
    a = make_org(name="A", sender_email="sales@shared.example")
    emailed(make_owner(organization=make_org(name="B", sender_email="team@shared.example")), 5)
    owner = make_owner(organization=a)
    old = emailed(owner, 40)
    _bounces(client, old[:3])
    assert len(_active()) == 2  # A's owner, and A on the domain
    # when A's operator resumes them from the Pauses list
    operator = make_user("a-ops", permissions=["view_pause", "change_pause"], organizations=[a])
    ids = list(Pause.objects.filter(resumed_at__isnull=True).values_list("pk", flat=True))
    response = logged_in(operator).post(
        PAUSES, {"action": "resume_selected", "_selected_action": ids}, follow=True
    )
    assert response.status_code == 200
    assert _active() == set()
    # and a late bounce of an email sent before the resume arrives
    assert postmark(client, postmark_bounce(old[3].email, "HardBounce")).status_code == 200
    # then nothing is paused again: the rates start over from the resume
    assert Lead.objects.get(pk=old[3].pk).status == Lead.Status.BOUNCED
    assert _active() == set()
    # when the owner sends 20 emails after it and two of those bounce (10 %)
    new = emailed(owner, 20)
    _bounces(client, new[:1])
    assert _active() == set()  # 1 of 20: 5 %, not over
    _bounces(client, new[1:2])
    # then the owner and A on the domain are paused again, counted over the sends since
    reasons = set(Pause.objects.filter(resumed_at__isnull=True).values_list("reason", flat=True))
    assert reasons == {"hard-bounce rate 10.0% over the last 20 sends > 5%"}
    assert {(p[0], p[2]) for p in _active()} == {(a.pk, ""), (a.pk, "shared.example")}
    assert Outreach.objects.filter(lead__organization=a, state=State.SENT).count() == 60
