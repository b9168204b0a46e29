"""One answer per conversation turn, with real workers: leads who write twice, two seconds
apart, get one email each that answers both messages (docs/email.md, "One answer per turn")."""

from __future__ import annotations

import json
import re
import time

import pytest
from django.test import Client

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


def _answer_quoting_the_questions(request: StubRequest) -> StubResponse:
    """The provider's email names every question its prompt showed it."""
    prompt = "\n".join(m["content"] for m in request.json["messages"])
    asked = " and ".join(sorted(set(ASK.findall(prompt)))) or "nothing"
    return StubResponse(
        delay_s=CALL_S, text=f"Subject: Answers\n\nHi Pat,\n\nYou asked {asked}: here you are.\n\nAnn"
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
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink, webhook_secret: str
) -> None:
    # given real workers up (a first email went out) and a provider that quotes what it was asked
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
