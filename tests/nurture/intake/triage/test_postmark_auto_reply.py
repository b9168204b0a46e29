"""The issue's repro through Postmark's inbound webhook (its documented JSON, the headers in
`Headers`): an out-of-office with `Auto-Submitted: auto-replied` is recorded, not answered,
asks no model, and the lead's next nudge moves after the return date."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from nurture.reply_actions import resume_at
from outreach.models import Lead, Outreach, State
from tests.factories import make_lead, make_outreach
from tests.nurture.intake.test_inbound_trust import PASSING, PROSPECT, post, postmark

pytestmark = pytest.mark.django_db
OURS = "<5f1c0ffee0ddba11c0ffee0ddba11abc@seller.example>"


def test_an_auto_submitted_out_of_office_via_postmark_is_not_answered_and_moves_the_nudge(
    client: Client,
) -> None:
    # given a lead we wrote to, its nudge due in two days
    lead = make_lead(email=PROSPECT)
    make_outreach(lead=lead, state=State.SENT, sent_at=timezone.now(), message_id=OURS)
    nudge = make_outreach(
        lead=lead, kind=Outreach.Kind.NUDGE, step=1, not_before=timezone.now() + timedelta(days=2)
    )
    back = timezone.now().date() + timedelta(days=10)
    payload = postmark(
        in_reply_to=OURS,
        references=OURS,
        headers=[*PASSING, {"Name": "Auto-Submitted", "Value": "auto-replied"}],
    )
    payload["TextBody"] = payload["StrippedTextReply"] = f"I am out of the office until {back.isoformat()}."
    # when Postmark posts it
    assert post(client, payload).status_code == 200
    # then it is recorded with its class, cancelled, and the nudge waits for the return date
    reply = Outreach.objects.get(kind=Outreach.Kind.REPLY)
    assert (reply.state, reply.reply_class, reply.reply_class_by) == (
        State.CANCELLED,
        "out_of_office",
        "rules",
    )
    nudge.refresh_from_db()
    assert nudge.state == State.QUEUED
    assert nudge.not_before >= resume_at(return_date=back, now=timezone.now())
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.ACTIVE
