"""Reply triage with real workers, through Mailgun's inbound webhook (raw MIME, as its forward()
route posts it): an out-of-office gets no email and moves the next nudge after its return date;
a delivery status report suppresses the lead; a complaint from an autonomous owner's lead
waits in the approval queue; a referral creates nothing until a person confirms it
(docs/email.md, "Reply triage")."""

from __future__ import annotations

import hashlib
import hmac
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from devtools.llm_stub import LLMStub
from devtools.processes import ProcessGroup
from devtools.smtp_sink import SMTPSink
from nurture.reply_actions import resume_at
from outreach.models import Lead, Outreach, ReferralProposal, State
from tests.e2e.conftest import start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

KEY = "mailgun-webhook-signing-key"
BACK = timezone.now().date() + timedelta(days=12)


def _mime(*, sender: str, ours: str, n: int, subject: str, body: str, extra: str = "") -> str:
    return (
        f"From: {sender}\r\nTo: sales@seller.example\r\nSubject: {subject}\r\n"
        f"Message-ID: <inbound-{n}@prospect.example>\r\nIn-Reply-To: {ours}\r\nReferences: {ours}\r\n"
        f"Date: Thu, 26 Nov 2026 10:00:00 +0000\r\nMIME-Version: 1.0\r\n{extra}"
        f"Content-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
    )


def _dsn(*, lead: Lead, ours: str) -> str:
    return (
        "From: Mail Delivery System <MAILER-DAEMON@mx.prospect.example>\r\nTo: sales@seller.example\r\n"
        "Subject: Undelivered Mail Returned to Sender\r\nMessage-ID: <dsn-1@mx.prospect.example>\r\n"
        "Auto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="RPT"\r\n\r\n'
        "--RPT\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n\r\n"
        "--RPT\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.prospect.example\r\n\r\n"
        f"Final-Recipient: rfc822; {lead.email}\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n"
        f"--RPT\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: {ours}\r\nSubject: Hello\r\n\r\n--RPT--\r\n"
    )


def _post(client: Client, mime: str) -> None:
    timestamp, token = "1461261330", "06c96bafc3f42a66b9edd546347a2fe18dc23461fe80dc52f0"
    signature = hmac.new(KEY.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    fields = {"body-mime": mime, "recipient": "sales@seller.example", "timestamp": timestamp, "token": token}
    response = client.post(
        "/hooks/anymail/mailgun/inbound/",
        data={**fields, "signature": signature},
        headers={"Authorization": "Basic YW55bWFpbDp0ZXN0LXNlY3JldA=="},  # anymail:test-secret
    )
    assert response.status_code == 200, response.content


def test_triage_acts_on_each_class_with_real_workers(
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink, settings: Any
) -> None:
    settings.ANYMAIL = {**settings.ANYMAIL, "MAILGUN_WEBHOOK_SIGNING_KEY": KEY}
    # given an autonomous owner's four leads we wrote to, each with a nudge due in two days
    owner = make_owner(organization=make_org(), daily_limit=1000, review_required=False)
    leads, nudges, ours = [], [], []
    for n in range(4):
        lead = make_lead(owner=owner)
        ours.append(f"<outreach-{n}.e2e@seller.example>")
        make_outreach(lead=lead, state=State.SENT, sent_at=timezone.now(), message_id=ours[-1])
        nudges.append(
            make_outreach(
                lead=lead, kind=Outreach.Kind.NUDGE, step=1, not_before=timezone.now() + timedelta(days=2)
            )
        )
        leads.append(lead)
    ooo, bounced, angry, left = leads
    start_pipeline(stack)
    client = Client()
    # when they answer through the provider: an out-of-office, a bounce, a complaint, a referral
    _post(
        client,
        _mime(
            sender=ooo.email,
            ours=ours[0],
            n=0,
            subject="Automatic reply: Hello",
            body=f"I am out of the office until {BACK.isoformat()}.",
            extra="Auto-Submitted: auto-replied\r\n",
        ),
    )
    _post(client, _dsn(lead=bounced, ours=ours[1]))
    _post(
        client,
        _mime(
            sender=angry.email,
            ours=ours[2],
            n=2,
            subject="Re: Hello",
            body="This is spam. Stop it or I will report you to your provider and my lawyer.",
        ),
    )
    _post(
        client,
        _mime(
            sender=left.email,
            ours=ours[3],
            n=3,
            subject="Re: Hello",
            body="I have left the company. Please contact Sam Lee at sam.lee@prospect.example.",
        ),
    )
    # then the rules acted at intake: no answer, the nudge moved, the bouncing lead suppressed
    assert Outreach.objects.get(lead=ooo, kind=Outreach.Kind.REPLY).state == State.CANCELLED
    nudges[0].refresh_from_db()
    assert (nudges[0].state, nudges[0].not_before >= resume_at(return_date=BACK, now=timezone.now())) == (
        State.QUEUED,
        True,
    )
    assert Lead.objects.get(pk=bounced.pk).status == Lead.Status.BOUNCED
    # and the workers' triage call sent the complaint to a person, the referral to a proposal
    complaint = Outreach.objects.filter(lead=angry, kind=Outreach.Kind.REPLY)
    referral = Outreach.objects.filter(lead=left, kind=Outreach.Kind.REPLY)
    wait_until(
        lambda: (
            complaint.filter(state=State.AWAITING_APPROVAL).exists()
            and referral.filter(state=State.CANCELLED).exists()
        ),
        timeout_s=90,
        what="the complaint's draft waiting and the referral's reply cancelled",
        group=stack,
    )
    assert (complaint.get().reply_class, complaint.get().reply_class_by) == ("complaint", "model")
    proposal = ReferralProposal.objects.get(source=referral.get())
    assert (proposal.contact_email, proposal.status) == ("sam.lee@prospect.example", "proposed")
    assert not Lead.objects.filter(email="sam.lee@prospect.example").exists()
    # and nothing was mailed to anyone
    assert smtp_sink.messages == []
    assert Outreach.objects.get(pk=nudges[3].pk).state == State.CANCELLED
