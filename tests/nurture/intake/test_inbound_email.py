"""Email providers' inbound webhooks (django-anymail) over the real HTTP endpoints.

Payloads are shaped as the providers post them (as in anymail's own tests). Two organizations
write to the same person; the reply must land with the one whose Message-ID it answers, even
though the other emailed more recently. A bad signature or missing basic auth is a 4xx that
stores nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from devtools.smtp_sink import SMTPSink
from nurture.mail.sending import outreach_send
from outreach.models import Lead, Outreach, State, UnverifiedInbound
from tests.factories import DRAFT_BODY, DRAFT_SUBJECT, make_lead, make_org, make_outreach, make_owner

BASIC_AUTH = "anymail:test-secret"  # config/test_settings.py's ANYMAIL WEBHOOK_SECRET
MAILGUN_KEY = "mailgun-webhook-signing-key"
PROSPECT = "pat@prospect.example"
THEIRS = "<CAEPk3R+4Zr@mail.prospect.example>"
OURS_A = "<outreach-1.abc@seller-a.example>"
OURS_B = "<outreach-2.def@seller-b.example>"


@pytest.fixture(autouse=True)
def _mailgun_key(settings: Any) -> None:
    settings.ANYMAIL = {**settings.ANYMAIL, "MAILGUN_WEBHOOK_SIGNING_KEY": MAILGUN_KEY}


@pytest.fixture
def leads(db: None) -> tuple[Lead, Lead]:
    """The same person in organizations A and B; A wrote three days ago, B an hour ago."""
    now = timezone.now()
    a = make_lead(owner=make_owner(organization=make_org(name="Org A")), email=PROSPECT)
    b = make_lead(owner=make_owner(organization=make_org(name="Org B")), email=PROSPECT)
    make_outreach(lead=a, state=State.SENT, sent_at=now - timedelta(days=3), message_id=OURS_A)
    make_outreach(lead=b, state=State.SENT, sent_at=now - timedelta(hours=1), message_id=OURS_B)
    make_outreach(lead=a, kind=Outreach.Kind.NUDGE, step=1, not_before=now + timedelta(days=2))
    return a, b


def auth(credentials: str = BASIC_AUTH) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(credentials.encode()).decode()}


def mailgun_signed(fields: dict[str, str], *, key: str = MAILGUN_KEY) -> dict[str, str]:
    """Mailgun's forward() route: form fields plus timestamp, token and their HMAC-SHA256."""
    timestamp, token = "1461261330", "06c96bafc3f42a66b9edd546347a2fe18dc23461fe80dc52f0"
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    return {**fields, "timestamp": timestamp, "token": token, "signature": signature}


def mailgun_payload(*, in_reply_to: str = OURS_A, sender: str = PROSPECT) -> dict[str, str]:
    headers = [
        ["X-Mailgun-Sflag", "No"],
        ["From", f'"Pat Prospect" <{sender}>'],
        ["Date", "Wed, 11 Oct 2017 18:31:04 -0700"],
        ["Message-Id", THEIRS],
        ["In-Reply-To", in_reply_to],
        ["References", in_reply_to],
        ["Subject", "Re: Quick question"],
        ["To", "sales@seller-a.example"],
        ["Content-Type", 'multipart/alternative; boundary="089e0825ccf874a0bb055b4f7e23"'],
    ]
    return mailgun_signed(
        {
            "recipient": "sales@seller-a.example",
            "sender": sender,
            "message-headers": json.dumps(headers),
            "body-plain": "Yes, Tuesday works.\n\n> On Monday you wrote: ...",
            "stripped-text": "Yes, Tuesday works.",
        }
    )


def sendgrid_payload() -> dict[str, str]:
    """SendGrid Inbound Parse (default, not raw): the headers as text, the parts as fields."""
    headers = (
        "MIME-Version: 1.0\n"
        f"From: Pat Prospect <{PROSPECT}>\n"
        "Date: Wed, 11 Oct 2017 18:31:04 -0700\n"
        f"Message-ID: {THEIRS}\n"
        f"In-Reply-To: {OURS_A}\n"
        f"References: {OURS_A}\n"
        "Subject: Re: Quick question\n"
        "To: sales@seller-a.example\n"
        'Content-Type: multipart/alternative; boundary="94eb2c115edcf35387055b61f849"\n'
    )
    return {
        "headers": headers,
        "from": f"Pat Prospect <{PROSPECT}>",
        "to": "sales@seller-a.example",
        "subject": "Re: Quick question",
        "text": "Yes, Tuesday works.",
        "charsets": '{"to":"UTF-8","subject":"UTF-8","from":"UTF-8","text":"UTF-8"}',
        "envelope": json.dumps({"to": ["sales@seller-a.example"], "from": PROSPECT}),
        "attachments": "0",
    }


def postmark_payload() -> dict[str, Any]:
    """Postmark's inbound JSON: its own MessageID, and the email's headers as a list."""
    return {
        "FromFull": {"Email": PROSPECT, "Name": "Pat Prospect", "MailboxHash": ""},
        "ToFull": [{"Email": "sales@seller-a.example", "Name": "", "MailboxHash": ""}],
        "OriginalRecipient": "sales@seller-a.example",
        "Subject": "Re: Quick question",
        "MessageID": "22c74902-a0c1-4511-804f2-341342852c90",
        "Date": "Wed, 11 Oct 2017 18:31:04 -0700",
        "TextBody": "Yes, Tuesday works.\n\nOn Monday you wrote: ...",
        "StrippedTextReply": "Yes, Tuesday works.",
        "Headers": [
            {"Name": "Message-ID", "Value": THEIRS},
            {"Name": "In-Reply-To", "Value": OURS_A},
            {"Name": "References", "Value": OURS_A},
        ],
    }


def post(client: Client, provider: str, payload: Any, headers: dict[str, str] | None = None) -> Any:
    url = f"/hooks/anymail/{provider}/inbound/"
    headers = auth() if headers is None else headers
    if provider == "postmark":
        return client.post(url, data=json.dumps(payload), content_type="application/json", headers=headers)
    return client.post(url, data=payload, headers=headers)


PAYLOADS = {"mailgun": mailgun_payload, "sendgrid": sendgrid_payload, "postmark": postmark_payload}


@pytest.mark.filterwarnings("ignore::anymail.exceptions.AnymailNotSupportedWarning")
@pytest.mark.parametrize("provider", sorted(PAYLOADS))
def test_reply_lands_in_the_organization_whose_email_it_answers(
    client: Client, leads: tuple[Lead, Lead], provider: str
) -> None:
    a, b = leads
    # when the provider posts the prospect's answer to organization A's email
    response = post(client, provider, PAYLOADS[provider]())
    # then one reply is queued for A (not B, who emailed last), threaded under their message
    assert response.status_code == 200, response.content
    reply = Outreach.objects.get(kind=Outreach.Kind.REPLY)
    assert reply.lead_id == a.pk
    assert (reply.in_reply_to, reply.references) == (THEIRS, OURS_A)
    assert reply.context["inbound"] == {
        "subject": "Re: Quick question",
        "body": "Yes, Tuesday works.",
        "message_id": THEIRS,
    }
    # and A's sequence stops; B's lead is untouched
    assert Outreach.objects.get(lead=a, kind=Outreach.Kind.NUDGE).state == State.CANCELLED
    statuses = dict(Lead.objects.filter(pk__in=[a.pk, b.pk]).values_list("pk", "status"))
    assert statuses == {a.pk: Lead.Status.REPLIED, b.pk: Lead.Status.ACTIVE}


def test_amazon_ses_style_rewritten_message_id_matches_the_providers_id(
    client: Client, leads: tuple[Lead, Lead]
) -> None:
    # given the provider replaced our Message-ID with one built from its own id (Amazon SES)
    a, _ = leads
    Outreach.objects.filter(message_id=OURS_A).update(esp_message_id="0100017a-1b2c-4d5e")
    payload = mailgun_payload(in_reply_to="<0100017a-1b2c-4d5e@eu-west-1.amazonses.com>")
    # when the prospect answers that email
    assert post(client, "mailgun", payload).status_code == 200
    # then it is still A's conversation
    assert Outreach.objects.get(kind=Outreach.Kind.REPLY).lead_id == a.pk


def test_mail_from_a_leads_address_naming_none_of_our_emails_is_held_not_answered(
    client: Client, leads: tuple[Lead, Lead]
) -> None:
    # Before issue 26 this went by the sender's address to whoever emailed last, and was
    # answered: anyone can write a From line. Now it waits, unverified, for B's operators.
    _, b = leads
    payload = mailgun_payload(in_reply_to="<unrelated@elsewhere.example>", sender=PROSPECT.upper())

    assert post(client, "mailgun", payload).status_code == 200

    assert not Outreach.objects.filter(kind=Outreach.Kind.REPLY).exists()
    [held] = UnverifiedInbound.objects.all()
    assert (held.organization_id, held.lead_id, held.reason) == (b.organization_id, b.pk, "no_conversation")


def test_duplicate_delivery_records_one_reply(client: Client, leads: tuple[Lead, Lead]) -> None:
    responses = [post(client, "postmark", postmark_payload()) for _ in range(3)]

    assert [r.status_code for r in responses] == [200, 200, 200]
    assert Outreach.objects.filter(kind=Outreach.Kind.REPLY).count() == 1


@pytest.mark.parametrize(
    ("provider", "payload", "headers"),
    [
        ("mailgun", lambda: mailgun_signed(mailgun_payload(), key="another-key"), None),  # bad signature
        ("mailgun", mailgun_payload, {}),  # no basic auth
        ("postmark", postmark_payload, {}),
        ("postmark", postmark_payload, auth("anymail:wrong")),
        ("sendgrid", sendgrid_payload, auth("someone:else")),
    ],
)
@pytest.mark.filterwarnings("ignore::anymail.exceptions.AnymailNotSupportedWarning")
def test_unauthenticated_posts_are_refused_and_store_nothing(
    client: Client, leads: tuple[Lead, Lead], provider: str, payload: Any, headers: dict[str, str] | None
) -> None:
    response = post(client, provider, payload(), headers=headers)

    assert response.status_code == 400
    assert not Outreach.objects.filter(kind=Outreach.Kind.REPLY).exists()
    assert set(Lead.objects.values_list("status", flat=True)) == {Lead.Status.ACTIVE}


def test_mail_from_someone_who_is_no_lead_is_acknowledged_and_dropped(
    client: Client, leads: tuple[Lead, Lead]
) -> None:
    # a stranger writing to the inbound address: 200, so the provider does not retry for days
    payload = mailgun_payload(in_reply_to="<unrelated@elsewhere.example>", sender="stranger@else.example")

    assert post(client, "mailgun", payload).status_code == 200

    assert not Outreach.objects.filter(kind=Outreach.Kind.REPLY).exists()


def test_our_answer_to_a_provider_delivered_reply_threads_under_it_on_the_wire(
    client: Client, leads: tuple[Lead, Lead], smtp_sink: SMTPSink
) -> None:
    # given a reply delivered by Mailgun, answering organization A's email
    assert post(client, "mailgun", mailgun_payload()).status_code == 200
    reply = Outreach.objects.get(kind=Outreach.Kind.REPLY)
    # when our answer is written and sent over SMTP
    Outreach.objects.filter(id=reply.id).update(
        state=State.DISPATCHED, draft_subject=DRAFT_SUBJECT, draft_body=DRAFT_BODY
    )
    assert outreach_send(outreach_id=reply.id) == State.SENT
    # then it names their message, under ours
    message = smtp_sink.wait_for(1)[0].message
    assert (message["In-Reply-To"], message["References"]) == (THEIRS, f"{OURS_A} {THEIRS}")


def test_a_ten_megabyte_reply_with_an_attachment_is_recorded_without_it(
    client: Client, leads: tuple[Lead, Lead]
) -> None:
    # given the prospect's answer with a 10 MB PDF attached, as Postmark posts it (base64 inline)
    pdf = base64.b64encode(b"%PDF-1.4 " + b"x" * (7_500_000)).decode()
    payload = postmark_payload() | {
        "Attachments": [
            {
                "Name": "terms.pdf",
                "Content": pdf,
                "ContentType": "application/pdf",
                "ContentLength": 7_500_009,
            }
        ]
    }
    assert len(json.dumps(payload)) > 10_000_000
    # when the provider posts it
    response = post(client, "postmark", payload)
    # then the reply is recorded, its text kept and the attachment not
    assert response.status_code == 200, response.content[:300]
    reply = Outreach.objects.get(kind=Outreach.Kind.REPLY)
    assert reply.context["inbound"]["body"] == "Yes, Tuesday works."
    assert pdf[:100] not in json.dumps(reply.context)
