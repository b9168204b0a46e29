"""Which inbound email is believed to be the lead's reply (issue 26, item 1), over the real HTTP
endpoints with Postmark's documented inbound JSON.

Each conversation starts with an email really sent (over SMTP to the sink): its Message-ID and
its Reply-To (`reply+<token>@<inbound domain>`) are read off the wire, as a mail client would.
A reply is believed, and answered, only when it names one conversation (by that reply address
and/or by In-Reply-To / References), comes from that conversation's lead, and no verdict the
provider gave failed. Everything else from a lead's address is kept unverified, not answered.
"""

from __future__ import annotations

import hashlib
import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from devtools.smtp_sink import SMTPSink
from nurture.mail.sending import outreach_send
from outreach.models import Lead, Outreach, State
from tests.factories import make_draft, make_lead, make_org, make_outreach, make_owner
from tests.nurture.intake.test_inbound_email import (  # _mailgun_key: Mailgun's signing key, autouse
    OURS_A,
    _mailgun_key,  # noqa: F401
    auth,
    mailgun_payload,
    mailgun_signed,
    sendgrid_payload,
)

PROSPECT = "pat@prospect.example"
THEIRS = "<CAEPk3R+trust@mail.prospect.example>"
PASSING = [
    {
        "Name": "Received-SPF",
        "Value": "Pass (sender SPF authorized) identity=mailfrom; client-ip=209.85.160.180",
    },
    {
        "Name": "Authentication-Results",
        "Value": "inbound.postmarkapp.com; spf=pass smtp.mailfrom=prospect.example; "
        "dkim=pass header.d=prospect.example; dmarc=pass header.from=prospect.example",
    },
    {"Name": "X-Spam-Status", "Value": "No"},
    {"Name": "X-Spam-Score", "Value": "-0.1"},
]
FAILING = [
    {
        "Name": "Received-SPF",
        "Value": "Fail (inbound.postmarkapp.com: domain of prospect.example does not designate "
        "203.0.113.9 as permitted sender) client-ip=203.0.113.9; envelope-from=pat@prospect.example",
    },
    {
        "Name": "Authentication-Results",
        "Value": "inbound.postmarkapp.com; spf=fail (sender IP is 203.0.113.9) smtp.mailfrom=prospect.example; "
        "dkim=fail (signature did not verify) header.d=prospect.example; "
        "dmarc=fail action=none header.from=prospect.example",
    },
    {"Name": "X-Spam-Status", "Value": "No"},
]


@pytest.fixture
def conversations(db: None, smtp_sink: SMTPSink) -> dict[str, Any]:
    """The same person as a lead of organizations A and B, each emailed once for real (A three
    days ago, B an hour ago); A's second step still waiting."""
    leads = {
        name: make_lead(owner=make_owner(organization=make_org(name=f"Org {name}")), email=PROSPECT)
        for name in ("A", "B")
    }
    found: dict[str, Any] = {}
    for n, (name, lead) in enumerate(leads.items(), start=1):
        draft = make_draft(lead=lead, state=State.DISPATCHED)
        assert outreach_send(outreach_id=draft.pk) == State.SENT
        message = smtp_sink.wait_for(n)[n - 1].message
        found[name] = {"lead": lead, "outreach": draft, "message_id": message["Message-ID"]}
        found[name]["reply_to"] = message["Reply-To"]
    Outreach.objects.filter(pk=found["A"]["outreach"].pk).update(sent_at=timezone.now() - timedelta(days=3))
    make_outreach(
        lead=leads["A"], kind=Outreach.Kind.NUDGE, step=1, not_before=timezone.now() + timedelta(days=2)
    )
    found["sink"] = smtp_sink
    return found


def postmark(
    *,
    sender: str = PROSPECT,
    to: str = "sales@seller.example",
    in_reply_to: str = "",
    references: str = "",
    headers: list[dict[str, str]] = PASSING,
    message_id: str = THEIRS,
) -> dict[str, Any]:
    """Postmark's inbound JSON (its documented shape): the recipient's plus-address hash in
    MailboxHash, the verdict headers it adds (Received-SPF, X-Spam-*) in Headers."""
    mailbox = to.partition("@")[0]
    threading = [{"Name": "In-Reply-To", "Value": in_reply_to}] if in_reply_to else []
    threading += [{"Name": "References", "Value": references}] if references else []
    return {
        "FromName": "Pat Prospect",
        "From": sender,
        "FromFull": {"Email": sender, "Name": "Pat Prospect", "MailboxHash": ""},
        "To": to,
        "ToFull": [{"Email": to, "Name": "", "MailboxHash": mailbox.partition("+")[2]}],
        "Cc": "",
        "CcFull": [],
        "OriginalRecipient": to,
        "ReplyTo": "",
        "Subject": "Re: Quick question about your reporting",
        "MessageID": "22c74902-a0c1-4511-804f2-341342852c90",
        "Date": "Thu, 26 Nov 2026 18:31:04 +0000",
        "MailboxHash": mailbox.partition("+")[2],
        "TextBody": "Please send the contract to my new address.\n\nOn Monday you wrote: ...",
        "StrippedTextReply": "Please send the contract to my new address.",
        "Tag": "",
        "Headers": [
            {
                "Name": "X-Spam-Checker-Version",
                "Value": "SpamAssassin 3.3.1 (2010-03-16) onrs-ord-pm-inbound1.wildbit.com",
            },
            *headers,
            {"Name": "MIME-Version", "Value": "1.0"},
            {"Name": "Message-ID", "Value": message_id},
            *threading,
        ],
        "Attachments": [],
    }


def post(client: Client, payload: dict[str, Any]) -> Any:
    return client.post(
        "/hooks/anymail/postmark/inbound/",
        data=json.dumps(payload),
        content_type="application/json",
        headers=auth(),
    )


def replies() -> list[tuple[int, str]]:
    return list(Outreach.objects.filter(kind=Outreach.Kind.REPLY).values_list("lead_id", "state"))


def held() -> list[dict[str, Any]]:
    """The unverified inbound kept for a person (looked up by name: the model is new)."""
    model = apps.get_model("outreach", "UnverifiedInbound")
    fields = ("organization__name", "lead_id", "sender", "reason", "status", "subject", "body")
    return list(model.objects.values(*fields))


def untouched(conversations: dict[str, Any]) -> None:
    """No answer queued, the lead still active, A's sequence still running, nothing more emailed."""
    assert replies() == []
    assert set(Lead.objects.values_list("status", flat=True)) == {Lead.Status.ACTIVE}
    assert Outreach.objects.get(kind=Outreach.Kind.NUDGE).state == State.QUEUED
    assert conversations["sink"].snapshot()[0] == 2


def test_a_stranger_answering_a_real_thread_is_kept_unverified_and_not_answered(
    client: Client, conversations: dict[str, Any]
) -> None:
    a = conversations["A"]
    # when mallory answers A's email, naming it exactly (as the attack did)
    payload = postmark(sender="mallory@evil.example", in_reply_to=a["message_id"], references=a["message_id"])
    assert post(client, payload).status_code == 200
    # then nothing is answered, and the message waits for a person in A's organization
    untouched(conversations)
    [row] = held()
    assert (row["organization__name"], row["lead_id"], row["sender"]) == (
        "Org A",
        a["lead"].pk,
        "mallory@evil.example",
    )
    assert (row["reason"], row["status"]) == ("sender_not_lead", "held")
    assert row["body"] == "Please send the contract to my new address."


def test_the_leads_own_address_with_failing_spf_dkim_and_dmarc_is_not_answered(
    client: Client, conversations: dict[str, Any]
) -> None:
    a = conversations["A"]
    payload = postmark(in_reply_to=a["message_id"], references=a["message_id"], headers=FAILING)

    assert post(client, payload).status_code == 200

    untouched(conversations)
    [row] = held()
    assert (row["organization__name"], row["lead_id"], row["reason"]) == (
        "Org A",
        a["lead"].pk,
        "authentication",
    )


def test_thousands_of_guessed_message_ids_match_nothing_and_only_the_cap_is_read(
    client: Client, conversations: dict[str, Any]
) -> None:
    # given A's real Message-ID at the head of References, then 5,000 guesses in the old
    # predictable form (a sequential id and a hash of public values), the right one among them
    a = conversations["A"]
    digest = hashlib.sha256(a["outreach"].idempotency_key.encode()).hexdigest()[:16]
    domain = a["message_id"].rpartition("@")[2].rstrip(">")
    guesses = [
        f"<outreach-{n}.{digest}@{domain}>" for n in range(a["outreach"].pk + 5_000, a["outreach"].pk - 1, -1)
    ]
    payload = postmark(references=" ".join([a["message_id"], *guesses]))
    # when the lead's address sends it to the plain inbound address
    with CaptureQueriesContext(connection) as queries:
        assert post(client, payload).status_code == 200
    # then no guess matches, the real id beyond the cap is never read, and nothing is answered
    untouched(conversations)
    assert [row["reason"] for row in held()] == ["no_conversation"]
    sql = " ".join(query["sql"] for query in queries.captured_queries)
    looked_up = set(re.findall(r"outreach-\d+\.", sql))
    assert 0 < len(looked_up) <= 20
    assert a["message_id"] not in sql


def test_a_reply_at_another_organizations_address_is_not_believed(
    client: Client, conversations: dict[str, Any]
) -> None:
    a, b = conversations["A"], conversations["B"]
    # when the message goes to B's reply address but names A's email
    payload = postmark(to=b["reply_to"], in_reply_to=a["message_id"], references=a["message_id"])

    assert post(client, payload).status_code == 200

    untouched(conversations)
    [row] = held()
    assert (row["organization__name"], row["lead_id"], row["reason"]) == (
        "Org B",
        b["lead"].pk,
        "other_conversation",
    )


def test_a_genuine_reply_is_believed_and_answered_in_its_conversation(
    client: Client, conversations: dict[str, Any]
) -> None:
    a = conversations["A"]
    assert a["reply_to"].startswith("reply+")
    payload = postmark(to=a["reply_to"], in_reply_to=a["message_id"], references=a["message_id"])

    assert post(client, payload).status_code == 200

    reply = Outreach.objects.get(kind=Outreach.Kind.REPLY)
    assert (reply.lead_id, reply.state, reply.in_reply_to, reply.references) == (
        a["lead"].pk,
        State.QUEUED,
        THEIRS,
        a["message_id"],
    )
    assert Outreach.objects.get(kind=Outreach.Kind.NUDGE).state == State.CANCELLED
    assert held() == []


def test_a_client_that_drops_in_reply_to_still_threads_by_the_reply_address(
    client: Client, conversations: dict[str, Any]
) -> None:
    # given A's reply address only (B emailed the person more recently)
    a = conversations["A"]
    payload = postmark(to=a["reply_to"])

    assert post(client, payload).status_code == 200

    assert replies() == [(a["lead"].pk, State.QUEUED)]
    assert Outreach.objects.get(kind=Outreach.Kind.REPLY).references == a["message_id"]


def test_the_same_unverified_message_delivered_twice_is_kept_once(
    client: Client, conversations: dict[str, Any]
) -> None:
    a = conversations["A"]
    payload = postmark(sender="mallory@evil.example", to=a["reply_to"])

    assert [post(client, payload).status_code for _ in range(3)] == [200, 200, 200]

    assert len(held()) == 1


def test_our_message_ids_and_reply_addresses_are_random_and_kept_for_the_resend(
    conversations: dict[str, Any],
) -> None:
    # then neither names the outreach id nor a hash of its key, and each is stored on the row
    for name in ("A", "B"):
        sent = Outreach.objects.get(pk=conversations[name]["outreach"].pk)
        assert sent.message_id == conversations[name]["message_id"]
        assert f"outreach-{sent.pk}." not in sent.message_id
        assert conversations[name]["reply_to"] == f"reply+{sent.reply_token}@reply.localhost"
    assert conversations["A"]["reply_to"] != conversations["B"]["reply_to"]


@pytest.mark.filterwarnings("ignore::anymail.exceptions.AnymailNotSupportedWarning")
@pytest.mark.parametrize(
    ("provider", "verdict", "reason"),
    [
        ("mailgun", {"X-Mailgun-Spf": "Fail"}, "authentication"),
        ("mailgun", {"X-Mailgun-Dkim-Check-Result": "Fail"}, "authentication"),
        ("mailgun", {"X-Mailgun-Sflag": "Yes"}, "spam"),
        ("sendgrid", {"SPF": "softfail"}, "authentication"),
        ("sendgrid", {"dkim": "{@prospect.example : fail}"}, "authentication"),
        ("sendgrid", {"spam_score": "7.9"}, "spam"),
    ],
)
def test_mailgun_and_sendgrid_verdicts_hold_the_leads_own_reply(
    client: Client, conversations: dict[str, Any], provider: str, verdict: dict[str, str], reason: str
) -> None:
    # given the lead's reply to A's email, to its reply address, as each provider posts it
    a = conversations["A"]
    payload = _provider_payload(provider, to=a["reply_to"], parent=a["message_id"], verdict=verdict)
    # when the provider says it failed a check
    response = client.post(f"/hooks/anymail/{provider}/inbound/", data=payload, headers=auth())
    # then it is held, not answered
    assert response.status_code == 200, response.content
    untouched(conversations)
    assert [row["reason"] for row in held()] == [reason]


@pytest.mark.filterwarnings("ignore::anymail.exceptions.AnymailNotSupportedWarning")
@pytest.mark.parametrize("provider", ["mailgun", "sendgrid"])
def test_mailgun_and_sendgrid_passing_replies_are_answered(
    client: Client, conversations: dict[str, Any], provider: str
) -> None:
    a = conversations["A"]
    passing = {
        "mailgun": {"X-Mailgun-Spf": "Pass", "X-Mailgun-Dkim-Check-Result": "Pass", "X-Mailgun-Sflag": "No"},
        "sendgrid": {"SPF": "pass", "dkim": "{@prospect.example : pass}", "spam_score": "0.1"},
    }[provider]
    payload = _provider_payload(provider, to=a["reply_to"], parent=a["message_id"], verdict=passing)

    assert client.post(f"/hooks/anymail/{provider}/inbound/", data=payload, headers=auth()).status_code == 200

    assert replies() == [(a["lead"].pk, State.QUEUED)]


def _provider_payload(provider: str, *, to: str, parent: str, verdict: dict[str, str]) -> dict[str, str]:
    """Mailgun's forward() post (verdicts among its message-headers) or SendGrid's Inbound Parse
    post (verdicts as its own form fields), as tests/nurture/intake/test_inbound_email.py builds them."""
    if provider == "mailgun":
        payload = mailgun_payload(in_reply_to=parent)
        headers = [*json.loads(payload["message-headers"]), *verdict.items()]
        headers = [
            [name, to if name == "To" else value] for name, value in headers if name != "X-Mailgun-Sflag"
        ]
        headers.append(["X-Mailgun-Sflag", verdict.get("X-Mailgun-Sflag", "No")])
        return mailgun_signed({**payload, "recipient": to, "message-headers": json.dumps(headers)})
    payload = sendgrid_payload()
    payload["headers"] = (
        payload["headers"].replace(OURS_A, parent).replace("To: sales@seller-a.example", f"To: {to}")
    )
    return {**payload, "to": to, "envelope": json.dumps({"to": [to], "from": PROSPECT}), **verdict}


def test_a_reply_address_we_never_gave_out_is_not_believed(
    client: Client, conversations: dict[str, Any]
) -> None:
    a = conversations["A"]
    guessed = "reply+" + "0" * 32 + "@reply.localhost"
    payload = postmark(to=guessed, in_reply_to=a["message_id"], references=a["message_id"])

    assert post(client, payload).status_code == 200

    untouched(conversations)
    assert [(row["organization__name"], row["reason"]) for row in held()] == [("Org A", "unknown_address")]


def test_reply_addresses_of_two_organizations_belong_to_neither(
    client: Client, conversations: dict[str, Any]
) -> None:
    # given the lead writing to both organizations' reply addresses at once (To and Cc)
    a, b = conversations["A"], conversations["B"]
    payload = postmark(to=a["reply_to"]) | {
        "Cc": b["reply_to"],
        "CcFull": [{"Email": b["reply_to"], "Name": "", "MailboxHash": ""}],
    }

    assert post(client, payload).status_code == 200

    # then no organization can be told: held for superusers, naming no lead
    untouched(conversations)
    assert [(row["organization__name"], row["lead_id"], row["reason"]) for row in held()] == [
        (None, None, "other_conversation")
    ]
