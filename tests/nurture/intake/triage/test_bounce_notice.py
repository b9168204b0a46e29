"""A bounce notice is bounce handling, whoever decides it: the rules (a delivery status report),
the model (a notice relayed as text, with no headers), or a person reclassifying a reply. Each
goes through the one bounce record of provider events (nurture.sequence.lead_problem_record):
the lead suppressed as a hard bounce, and its owner and sender domain paused when the bounce
rate is now over the threshold."""

from __future__ import annotations

import pytest
from django.utils import timezone

from devtools.llm_stub import LLMStub
from nurture.intake.belief import InboundReply
from nurture.intake.replies import reply_receive
from nurture.intake.triage.reclassify import reply_reclassify
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from orchestrator.models import Pause
from outreach.models import Lead, LeadEvent, Outreach, State
from outreach.transitions import transition
from tests.factories import make_lead, make_org, make_outreach, make_owner, make_user

pytestmark = pytest.mark.django_db

RATE = "hard-bounce rate 7.5% over the last 40 sends > 5%"


def _report(lead: Lead) -> InboundReply:
    """A mailer daemon's delivery status report about our email to the lead (rules decide it)."""
    return InboundReply(
        lead_email="MAILER-DAEMON@mx.prospect.example",
        message_id="<dsn-1@mx.prospect.example>",
        subject="Undelivered Mail Returned to Sender",
        body="This is the mail system at host mx.prospect.example. Your message could not be delivered.",
        in_reply_to=f"<o-{lead.pk}@sales.example>",
        provider="mailgun",
        headers=(("auto-submitted", "auto-replied"),),
        content_type="multipart/report",
        report_type="delivery-status",
        report_failed=(lead.email,),
    )


def _relayed(lead: Lead, body: str) -> InboundReply:
    """The same notice relayed through our JSON webhook as the lead's reply: text only."""
    return InboundReply(
        lead_email=lead.email,
        message_id="<relayed-1@prospect.example>",
        subject="Re: hello",
        body=body,
        in_reply_to=f"<o-{lead.pk}@sales.example>",
    )


def _generate(budget: Budget, outreach_id: int) -> State | None:
    reservation = budget.reserve(requests=4, tokens=2400)
    assert isinstance(reservation, Reservation)
    transition(
        outreach_id=outreach_id, from_=State.QUEUED, to=State.DISPATCHED, reservation_id=reservation.id
    )
    return outreach_generate(outreach_id=outreach_id, budget=budget)


@pytest.mark.parametrize("by", ["rules", "model", "person"])
def test_a_bounce_notice_is_recorded_as_a_bounce_whoever_decides_it(
    budget: Budget, llm_stub: LLMStub, by: str
) -> None:
    # given an autonomous owner with 40 emails sent, 2 of them to leads that bounced (5 %: not over)
    owner = make_owner(organization=make_org(sender_email="ann@sales.example"), review_required=False)
    leads = [make_lead(owner=owner) for _ in range(40)]
    for lead in leads:
        make_outreach(
            lead=lead, state=State.SENT, sent_at=timezone.now(), message_id=f"<o-{lead.pk}@sales.example>"
        )
    Lead.objects.filter(pk__in=[leads[0].pk, leads[1].pk]).update(status=Lead.Status.BOUNCED)
    lead = leads[2]
    # when a third lead's delivery failure notice arrives (7.5 %), decided by `by`
    if by == "rules":
        reply_id = reply_receive(reply=_report(lead)).outreach_id
    elif by == "model":
        notice = "Delivery has failed to these recipients or groups. The mailbox is unavailable."
        reply_id = reply_receive(reply=_relayed(lead, notice)).outreach_id
        assert _generate(budget, reply_id) == State.CANCELLED
    else:
        reply_id = reply_receive(reply=_relayed(lead, "Noted.")).outreach_id
        reply_reclassify(outreach_id=reply_id, reply_class="bounce_notice", by_id=make_user().pk)
    # then the reply is the class, never answered
    reply = Outreach.objects.get(pk=reply_id)
    assert (reply.reply_class, reply.reply_class_by, reply.state) == ("bounce_notice", by, State.CANCELLED)
    # and it is recorded as a provider's hard bounce is: the lead bounced, with its history
    # line, and the owner and its sender domain paused for the bounce rate
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.BOUNCED
    assert list(LeadEvent.objects.filter(lead=lead).values_list("to_status", flat=True)) == [
        Lead.Status.BOUNCED
    ]
    paused = Pause.objects.filter(resumed_at__isnull=True, source=Pause.Source.BOUNCES)
    assert sorted((p.owner_id is not None, p.sender_domain, p.reason) for p in paused) == [
        (False, "sales.example", RATE),
        (True, "", RATE),
    ]
    assert len(llm_stub.requests) == (1 if by == "model" else 0)  # the model's one triage call
