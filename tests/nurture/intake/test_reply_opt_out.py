"""A reply asking to stop, through Postmark's real inbound endpoint: the lead is opted out, the
message is kept, and nothing answers it: no LLM request reaches the provider, no email leaves,
now or for any later message (nurture/intake/opt_out.py, nurture/intake/replies.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from devtools.llm_stub import LLMStub
from devtools.smtp_sink import SMTPSink
from nurture.mail.sending import outreach_send
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget
from orchestrator.dispatch.cycle import dispatch_cycle
from outreach.models import Lead, LeadEvent, Outreach, State
from tests.nurture.intake.test_inbound_email import post, postmark_payload

pytestmark = pytest.mark.django_db

PROSPECT = "pat@prospect.example"
OUR_NUDGE = "<nudge-1@us>"  # make_lead_with_history's latest email to the lead


@pytest.fixture
def lead_history() -> dict[str, Any]:
    return {"email": PROSPECT, "nudge_waiting": True}


def _postmark_reply(*, text: str, message_id: str, subject: str = "Re: Quick question") -> dict[str, Any]:
    """Pat's answer to our nudge, as Postmark posts it (quoted thread below, stripped reply beside)."""
    return postmark_payload() | {
        "Subject": subject,
        "TextBody": f"{text}\n\nOn Monday Sam wrote:\n> Would a short call help?",
        "StrippedTextReply": text,
        "Headers": [
            {"Name": "Message-ID", "Value": message_id},
            {"Name": "In-Reply-To", "Value": OUR_NUDGE},
            {"Name": "References", "Value": f"<intro@us> {OUR_NUDGE}"},
        ],
    }


def _dispatch_and_run(budget: Budget, capture: Any) -> None:
    """One dispatch cycle, then the jobs it routed, called as the workers would."""
    with capture(execute=False):
        report = dispatch_cycle(budget=budget)
    for outreach_id in report.generation:
        if outreach_generate(outreach_id=outreach_id, budget=budget) == State.DISPATCHED:
            outreach_send(outreach_id=outreach_id, budget=budget)
    for outreach_id in report.send:
        outreach_send(outreach_id=outreach_id, budget=budget)


@pytest.mark.parametrize("text", ["STOP", "Please remove me from your list."])
def test_a_reply_asking_to_stop_opts_the_lead_out_and_is_never_answered(
    client: Client,
    lead: Lead,
    text: str,
    budget: Budget,
    llm_stub: LLMStub,
    smtp_sink: SMTPSink,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # when Postmark posts Pat's reply asking us to stop
    response = post(client, "postmark", _postmark_reply(text=text, message_id="<stop-1@prospect.example>"))
    # then the lead is opted out, the message is kept as its reply, cancelled, and nothing is queued
    assert response.status_code == 200, response.content
    lead.refresh_from_db()
    assert lead.status == Lead.Status.OPTED_OUT
    reply = Outreach.objects.get(lead=lead, kind=Outreach.Kind.REPLY)
    assert (reply.state, reply.context["inbound"]["body"]) == (State.CANCELLED, text)
    assert not Outreach.objects.filter(lead=lead, state=State.QUEUED).exists()  # the nudge too
    event = LeadEvent.objects.get(lead=lead)
    assert (event.from_status, event.to_status) == (Lead.Status.ACTIVE, Lead.Status.OPTED_OUT)
    assert event.note == "asked to stop in a reply (<stop-1@prospect.example>)"
    # when the dispatcher and the workers run
    _dispatch_and_run(budget, django_capture_on_commit_callbacks)
    # then no LLM request reached the provider and nothing was emailed
    assert llm_stub.requests == []
    assert smtp_sink.messages == []


def test_a_later_message_after_a_stop_gets_no_answer_either(
    client: Client,
    lead: Lead,
    budget: Budget,
    llm_stub: LLMStub,
    smtp_sink: SMTPSink,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given Pat asked us to stop
    assert (
        post(client, "postmark", _postmark_reply(text="STOP", message_id="<s1@p.example>")).status_code == 200
    )
    # when Pat writes again, without asking anything of the kind
    later = _postmark_reply(text="Who gave you my address?", message_id="<s2@p.example>")
    assert post(client, "postmark", later).status_code == 200
    _dispatch_and_run(budget, django_capture_on_commit_callbacks)
    # then it is recorded too, and still nothing is written or sent
    replies = Outreach.objects.filter(lead=lead, kind=Outreach.Kind.REPLY).order_by("id")
    assert [(r.state, r.context["inbound"]["body"]) for r in replies] == [
        (State.CANCELLED, "STOP"),
        (State.CANCELLED, "Who gave you my address?"),
    ]
    assert (llm_stub.requests, smtp_sink.messages) == ([], [])
    lead.refresh_from_db()
    assert lead.status == Lead.Status.OPTED_OUT


def test_an_ordinary_reply_is_answered_by_the_same_harness(
    client: Client,
    lead: Lead,
    budget: Budget,
    llm_stub: LLMStub,
    smtp_sink: SMTPSink,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # the control: the same path, a reply that asks nothing of the kind, is written and sent
    reply = _postmark_reply(text="Yes, Tuesday works.", message_id="<yes-1@prospect.example>")
    assert post(client, "postmark", reply).status_code == 200

    _dispatch_and_run(budget, django_capture_on_commit_callbacks)

    lead.refresh_from_db()
    assert lead.status == Lead.Status.REPLIED
    assert (
        len(llm_stub.requests) == 4
    )  # the triage call (rules did not settle it), then the three writing ones
    assert [m.message["To"] for m in smtp_sink.wait_for(1)] == [PROSPECT]


@pytest.mark.parametrize("status", [Lead.Status.BOUNCED, Lead.Status.COMPLAINED])
def test_a_reply_from_a_bounced_or_complained_lead_does_not_bring_it_back(
    client: Client,
    lead: Lead,
    status: Lead.Status,
    budget: Budget,
    llm_stub: LLMStub,
    smtp_sink: SMTPSink,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given a lead whose mailbox bounced, or who marked our email as spam
    Lead.objects.filter(pk=lead.pk).update(status=status)
    # when a reply from the address arrives anyway
    reply = _postmark_reply(text="Actually, tell me more.", message_id="<more@prospect.example>")
    assert post(client, "postmark", reply).status_code == 200
    _dispatch_and_run(budget, django_capture_on_commit_callbacks)
    # then it is recorded, unanswered, and the lead keeps its status
    assert Outreach.objects.get(lead=lead, kind=Outreach.Kind.REPLY).state == State.CANCELLED
    assert (llm_stub.requests, smtp_sink.messages) == ([], [])
    lead.refresh_from_db()
    assert lead.status == status


def test_a_stop_while_the_answer_to_an_earlier_message_waits_cancels_that_answer_too(
    client: Client,
    lead: Lead,
    budget: Budget,
    llm_stub: LLMStub,
    smtp_sink: SMTPSink,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given Pat asked a question, whose answer is queued and not written yet
    question = _postmark_reply(text="What does it cost?", message_id="<q@prospect.example>")
    assert post(client, "postmark", question).status_code == 200
    # when Pat writes "STOP" before it is written
    assert (
        post(client, "postmark", _postmark_reply(text="STOP", message_id="<s@p.example>")).status_code == 200
    )
    _dispatch_and_run(budget, django_capture_on_commit_callbacks)
    # then neither message is answered: the waiting answer is cancelled with the opt-out
    replies = Outreach.objects.filter(lead=lead, kind=Outreach.Kind.REPLY).order_by("id")
    assert [(r.context["inbound"]["body"], r.state) for r in replies] == [
        ("What does it cost?", State.CANCELLED),
        ("STOP", State.CANCELLED),
    ]
    assert (llm_stub.requests, smtp_sink.messages) == ([], [])
