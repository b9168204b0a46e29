"""Our answer to a prospect threads under *their* message, on the wire (a real SMTP server).

Mail clients thread by In-Reply-To and References: In-Reply-To must name the prospect's
Message-ID, and References carry the thread, ours then theirs (RFC 5322 3.6.4).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.test import Client

from devtools.smtp_sink import SMTPSink
from nurture.intake.replies import signature_header
from nurture.mail.sending import outreach_send
from outreach.models import Lead, Outreach, State
from tests.conftest import WEBHOOK_SECRET
from tests.factories import DRAFT_BODY, DRAFT_SUBJECT

THEIRS = "<CAEPk3R+4Zr@mail.prospect.example>"

pytestmark = pytest.mark.usefixtures("webhook_secret")


def post_reply(client: Client, payload: dict[str, Any]) -> Outreach:
    body = json.dumps(payload).encode()
    header = signature_header(body=body, secret=WEBHOOK_SECRET, timestamp=int(time.time()))
    response = client.post(
        "/hooks/replies/", data=body, content_type="application/json", headers={"X-Signature": header}
    )
    assert response.status_code == 202, response.content
    return Outreach.objects.get(id=response.json()["outreach_id"])


def send_answer(reply: Outreach) -> None:
    """The reply's draft written and dispatched, then sent as the send worker does."""
    Outreach.objects.filter(id=reply.id).update(
        state=State.DISPATCHED, draft_subject=DRAFT_SUBJECT, draft_body=DRAFT_BODY
    )
    assert outreach_send(outreach_id=reply.id) == State.SENT


@pytest.fixture
def lead_history() -> dict[str, Any]:
    """A lead we emailed twice from our organization's own address: the intro, then (latest) a nudge."""
    return {
        "sender_email": "sales@seller.example",
        "email": "pat@prospect.example",
        "message_domain": "seller.example",
    }


def test_answer_names_their_message_in_in_reply_to_and_ours_then_theirs_in_references(
    client: Client, smtp_sink: SMTPSink, lead: Lead
) -> None:
    # given the prospect answered our intro (not the latest email) and said so
    reply = post_reply(
        client,
        {
            "lead_email": lead.email,
            "message_id": THEIRS,
            "subject": "Re: hello",
            "body": "Tell me more.",
            "in_reply_to": "<intro@seller.example>",
        },
    )
    # when our answer is sent
    send_answer(reply)
    # then it threads under their message: In-Reply-To theirs, References ours then theirs
    [received] = smtp_sink.wait_for(1)
    assert received.message["In-Reply-To"] == THEIRS
    assert received.message["References"] == f"<intro@seller.example> {THEIRS}"
    reply.refresh_from_db()
    assert (reply.in_reply_to, reply.references) == (THEIRS, "<intro@seller.example>")


def test_without_in_reply_to_the_thread_is_our_last_email_then_theirs(
    client: Client, smtp_sink: SMTPSink, lead: Lead
) -> None:
    # given the JSON webhook's original contract: no in_reply_to
    reply = post_reply(
        client, {"lead_email": lead.email, "message_id": THEIRS, "subject": "Re: hi", "body": "Sure."}
    )
    # when our answer is sent
    send_answer(reply)
    # then it answers their message, under the last email we sent them
    message = smtp_sink.wait_for(1)[0].message
    assert message["In-Reply-To"] == THEIRS
    assert message["References"] == f"<nudge-1@seller.example> {THEIRS}"
