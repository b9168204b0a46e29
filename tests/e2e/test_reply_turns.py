"""One answer per conversation turn, with real workers: leads who write twice, two seconds
apart, get one email each that answers both messages (docs/email.md, "One answer per turn"),
whether the second message joins an answer being written (REPLY_QUIET_S=0, a slow model) or
one waiting out its quiet period (REPLY_QUIET_S=10, a fast model; docs/dispatch.md)."""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from devtools.llm_stub import LLMStub, StubRequest, StubResponse
from devtools.processes import ProcessGroup
from devtools.smtp_sink import SMTPSink
from nurture.intake.replies import signature_header
from outreach.models import Lead, Outreach, OutreachEvent, State
from outreach.transitions import IN_FLIGHT
from tests.conftest import WEBHOOK_SECRET
from tests.e2e.conftest import start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ASK = re.compile(r"ASK-\d+-[ab]")
CALL_S = 1.0  # three calls: ~3 s to write an answer, so a message 2 s later lands mid-way


def _answer_quoting_the_questions(request: StubRequest, *, delay_s: float = CALL_S) -> StubResponse:
    """The provider's email names every question its prompt showed it."""
    prompt = "\n".join(m["content"] for m in request.json["messages"])
    asked = " and ".join(sorted(set(ASK.findall(prompt)))) or "nothing"
    return StubResponse(
        delay_s=delay_s, text=f"Subject: Answers\n\nHi Pat,\n\nYou asked {asked}: here you are.\n\nAnn"
    )


def _write(client: Client, lead: Lead, n: int, part: str) -> None:
    payload = {
        "lead_email": lead.email,
        "message_id": f"<ask-{n}-{part}@prospect.example>",
        "subject": "Re: hello",
        "body": f"Question ASK-{n}-{part}?",
    }
    raw = json.dumps(payload).encode()
    header = signature_header(body=raw, secret=WEBHOOK_SECRET, timestamp=int(time.time()))
    response = client.post(
        "/hooks/replies/", data=raw, content_type="application/json", headers={"X-Signature": header}
    )
    assert response.status_code == 202, response.content


def test_three_leads_writing_twice_two_seconds_apart_get_one_answer_each(
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink, webhook_secret: str, settings: Any
) -> None:
    # given real workers up (a first email went out), answers at once (no quiet period) and a
    # provider that quotes what it was asked
    settings.REPLY_QUIET_S = 0
    stack.env["REPLY_QUIET_S"] = "0"
    llm_stub.responder = _answer_quoting_the_questions
    owner = make_owner(organization=make_org(), daily_limit=1000)
    warm_up = make_outreach(lead=make_lead(owner=owner))
    start_pipeline(stack)
    wait_until(
        lambda: Outreach.objects.filter(pk=warm_up.pk, state=State.SENT).exists(),
        timeout_s=90,
        what="the warm-up email",
        group=stack,
    )
    leads = [make_lead(owner=owner) for _ in range(3)]
    client = Client()
    # when each lead writes, and writes again two seconds later
    for n, lead in enumerate(leads):
        _write(client, lead, n, "a")
    time.sleep(2.0)
    for n, lead in enumerate(leads):
        _write(client, lead, n, "b")
    # then each lead gets one email, answering both of its messages: three answers sent, and
    # nothing else on its way (an email leaves only from a row in flight)
    replies = Outreach.objects.filter(lead__in=leads, kind=Outreach.Kind.REPLY)
    wait_until(
        lambda: (
            replies.filter(state=State.SENT).count() == 3
            and not Outreach.objects.filter(lead__in=leads, state__in=IN_FLIGHT).exists()
        ),
        timeout_s=90,
        what="three answers sent, none in flight",
        group=stack,
    )
    assert replies.count() == 3
    by_recipient = {
        m.rcpt_tos[0]: m.message for m in smtp_sink.messages if m.rcpt_tos[0] != warm_up.lead.email
    }
    assert sorted(by_recipient) == sorted(lead.email for lead in leads)
    for n, lead in enumerate(leads):
        body = by_recipient[lead.email].get_content()
        assert f"ASK-{n}-a and ASK-{n}-b" in body, body
    rewritten = OutreachEvent.objects.filter(outreach__in=replies, note__startswith="a later message").count()
    print(f"answers rewritten because a message joined mid-way: {rewritten} of 3")


QUIET_S = 10
FAST_CALL_S = 0.1  # three calls: an answer written and sent within about a second


def test_with_a_quiet_period_leads_writing_twice_get_one_answer_after_it(
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink, webhook_secret: str, settings: Any
) -> None:
    # given REPLY_QUIET_S=10 (the intake here, the workers too), real workers up (a first email
    # went out: without the quiet period, an answer would now leave within about a second) and
    # a fast provider that quotes what it was asked
    settings.REPLY_QUIET_S = QUIET_S
    stack.env["REPLY_QUIET_S"] = str(QUIET_S)
    llm_stub.responder = lambda request: _answer_quoting_the_questions(request, delay_s=FAST_CALL_S)
    owner = make_owner(organization=make_org(), daily_limit=1000)
    warm_up = make_outreach(lead=make_lead(owner=owner))
    start_pipeline(stack)
    wait_until(
        lambda: Outreach.objects.filter(pk=warm_up.pk, state=State.SENT).exists(),
        timeout_s=90,
        what="the warm-up email",
        group=stack,
    )
    leads = [make_lead(owner=owner) for _ in range(3)]
    client = Client()
    # when each lead writes, and writes again two seconds later
    for n, lead in enumerate(leads):
        _write(client, lead, n, "a")
    time.sleep(2.0)
    second_written: dict[int, datetime] = {}
    for n, lead in enumerate(leads):
        second_written[lead.pk] = timezone.now()
        _write(client, lead, n, "b")
    # then each lead gets one email, answering both messages, sent once the lead had been quiet
    # 10 s: answers sent, nothing else waiting or on its way, and three of them
    replies = Outreach.objects.filter(lead__in=leads, kind=Outreach.Kind.REPLY)
    wait_until(
        lambda: (
            replies.filter(state=State.SENT).count() >= 3
            and not Outreach.objects.filter(lead__in=leads, state__in=[State.QUEUED, *IN_FLIGHT]).exists()
        ),
        timeout_s=QUIET_S + 30,
        what="answers sent, none queued or in flight",
        group=stack,
    )
    assert replies.count() == 3
    answers = [m for m in smtp_sink.messages if m.rcpt_tos[0] != warm_up.lead.email]
    assert sorted(m.rcpt_tos[0] for m in answers) == sorted(lead.email for lead in leads)
    by_recipient = {m.rcpt_tos[0]: m.message for m in answers}
    for n, lead in enumerate(leads):
        body = by_recipient[lead.email].get_content()
        assert f"ASK-{n}-a and ASK-{n}-b" in body, body
    for reply in replies:
        assert reply.inbound_joined == 1
        assert reply.sent_at is not None
        waited_s = (reply.sent_at - second_written[reply.lead_id]).total_seconds()
        assert waited_s >= QUIET_S, f"answered {waited_s:.1f} s after the lead's last message"
    # and no prompt ever showed the model one message of a lead without the other
    both = [{f"ASK-{n}-a", f"ASK-{n}-b"} for n in range(len(leads))]
    asked = [set(ASK.findall("\n".join(m["content"] for m in r.json["messages"]))) for r in llm_stub.requests]
    assert [questions for questions in asked if questions], "no prompt showed the questions"
    assert all(questions in both for questions in asked if questions), asked
