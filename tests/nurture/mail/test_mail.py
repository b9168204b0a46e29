"""nurture.mail.transport against a real SMTP server (aiosmtpd): headers, idempotency, opt-out, errors."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from django.core import signing

from devtools.smtp_sink import SMTPSink, free_port
from nurture.errors import OptedOut, PermanentError, PossiblySent, RecipientRefused, TransientError
from nurture.mail.sending import outreach_send, sending_claim
from nurture.mail.transport import (
    lead_id_from_token,
    outreach_message_id,
    reply_token_new,
    send_outreach_email,
    unsubscribe_token,
)
from orchestrator.models import DeadLetter
from outreach.idempotency import intro_key
from outreach.models import ErrorClass, Lead, Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db

DRAFT: dict[str, Any] = {
    "draft_subject": "Quick question",
    "draft_body": "Hi Pat,\n\nWould a short call help?\n\nBest, Sam",
}


@pytest.fixture
def outreach(settings: Any) -> Outreach:
    settings.PUBLIC_BASE_URL = "https://app.example.com"
    org = make_org(sender_email="sales@seller.example")
    lead = make_lead(owner=make_owner(organization=org, name="Sam Seller"), email="pat@prospect.example")
    return make_outreach(lead=lead, idempotency_key=intro_key(lead_id=lead.pk), **DRAFT)


def test_sends_one_email_with_the_right_headers(smtp_sink: SMTPSink, outreach: Outreach) -> None:
    # when
    message_id = send_outreach_email(outreach=outreach).message_id
    # then
    [received] = smtp_sink.wait_for(1)
    email = received.message
    assert received.rcpt_tos == ["pat@prospect.example"]
    assert received.mail_from == "sales@seller.example"
    assert email["To"] == "pat@prospect.example"
    assert email["From"] == "Sam Seller <sales@seller.example>"
    assert email["Subject"] == "Quick question"
    assert email.get_content().replace("\r\n", "\n").strip() == DRAFT["draft_body"]
    assert email["Message-ID"] == message_id
    # random, not derived from the id or the key (issue 26): `<32 hex digits@sender domain>`
    assert re.fullmatch(r"<[0-9a-f]{32}@seller\.example>", message_id)
    assert email["Reply-To"] is None  # no reply token recorded on this row: see below
    assert email["In-Reply-To"] is None
    assert email["References"] is None
    assert email["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    url = email["List-Unsubscribe"].strip()  # long, so folded onto its own line (valid RFC 5322)
    assert url.startswith("<https://app.example.com/unsubscribe/")
    assert url.endswith("/>")
    token = url.removeprefix("<https://app.example.com/unsubscribe/").removesuffix("/>")
    assert lead_id_from_token(token=token) == outreach.lead_id


def test_message_id_and_reply_address_are_stable_across_sends(
    smtp_sink: SMTPSink, outreach: Outreach
) -> None:
    # given the Message-ID and reply token recorded before SMTP, as the send worker's claim does
    Outreach.objects.filter(id=outreach.id).update(state=State.DISPATCHED)
    recorded, token = outreach_message_id(outreach=outreach), reply_token_new()
    sending_claim(outreach_id=outreach.id, message_id=recorded, reply_token=token)
    # when it is sent twice (a resend after a crash), loaded fresh each time
    first = send_outreach_email(outreach=Outreach.objects.get(id=outreach.id)).message_id
    second = send_outreach_email(outreach=Outreach.objects.get(id=outreach.id)).message_id
    # then receivers see one identity they can de-duplicate on, and one reply address
    messages = [m.message for m in smtp_sink.wait_for(2)]
    assert first == second == recorded
    assert [m["Message-ID"] for m in messages] == [recorded, recorded]
    assert [m["Reply-To"] for m in messages] == [f"reply+{token}@reply.localhost"] * 2


def test_two_new_message_ids_never_repeat(outreach: Outreach) -> None:
    # a Message-ID not recorded yet is drawn at random: nothing about the row predicts it
    assert outreach_message_id(outreach=outreach) != outreach_message_id(outreach=outreach)


def test_recorded_message_id_wins(smtp_sink: SMTPSink, outreach: Outreach) -> None:
    outreach.message_id = "<recorded-1@seller.example>"

    assert send_outreach_email(outreach=outreach).message_id == "<recorded-1@seller.example>"
    assert smtp_sink.wait_for(1)[0].message["Message-ID"] == "<recorded-1@seller.example>"


@pytest.mark.parametrize("in_reply_to", ["<abc.123@prospect.example>", "abc.123@prospect.example"])
def test_reply_threads_with_in_reply_to_and_references(
    smtp_sink: SMTPSink, outreach: Outreach, in_reply_to: str
) -> None:
    outreach.kind, outreach.in_reply_to = Outreach.Kind.REPLY, in_reply_to

    send_outreach_email(outreach=outreach)

    email = smtp_sink.wait_for(1)[0].message
    assert email["In-Reply-To"] == "<abc.123@prospect.example>"
    assert email["References"] == "<abc.123@prospect.example>"


def test_hostile_in_reply_to_cannot_inject_headers(smtp_sink: SMTPSink, outreach: Outreach) -> None:
    outreach.in_reply_to = "<a@b>\r\nBcc: victim@example.com"

    send_outreach_email(outreach=outreach)

    [received] = smtp_sink.wait_for(1)
    assert received.rcpt_tos == ["pat@prospect.example"]
    assert received.message["Bcc"] is None
    assert received.message["In-Reply-To"] is None


def test_opted_out_lead_is_never_emailed(smtp_sink: SMTPSink, outreach: Outreach) -> None:
    # given the lead opts out after the outreach (and its lead) was loaded
    Lead.objects.filter(id=outreach.lead_id).update(status=Lead.Status.OPTED_OUT)
    assert outreach.lead.status == Lead.Status.ACTIVE  # the stale copy the caller holds
    # when / then
    with pytest.raises(OptedOut):
        send_outreach_email(outreach=outreach)
    assert smtp_sink.wait_for(1, timeout_s=0.3) == []


def test_outreach_without_draft_is_permanent(smtp_sink: SMTPSink, outreach: Outreach) -> None:
    outreach.draft_body = "  "

    with pytest.raises(PermanentError, match="no draft"):
        send_outreach_email(outreach=outreach)
    assert smtp_sink.messages == []


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        ("550 5.1.1 No such user", RecipientRefused),  # a hard bounce: the lead is suppressed
        ("550 5.2.1 Mailbox disabled", RecipientRefused),
        ("550 No such user here", RecipientRefused),  # no enhanced status: 550 means the mailbox
        ("553 5.7.1 Relaying denied", PermanentError),  # our server's configuration, not the lead
        ("552 5.2.2 Mailbox full", PermanentError),
        ("451 4.3.0 Try again later", TransientError),
        ("452 4.2.2 Mailbox full", TransientError),
    ],
)
def test_recipient_refusal_is_classified(
    smtp_sink: SMTPSink, outreach: Outreach, reply: str, error: type[Exception]
) -> None:
    smtp_sink.refusals["pat@prospect.example"] = reply

    with pytest.raises(error) as caught:
        send_outreach_email(outreach=outreach)
    assert type(caught.value) is error
    assert caught.value.status == int(reply[:3])  # type: ignore[attr-defined]
    assert smtp_sink.messages == []


def test_connection_refused_is_transient(settings: Any, outreach: Outreach) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", free_port()

    with pytest.raises(TransientError, match="unreachable"):
        send_outreach_email(outreach=outreach)


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts TCP connections (the kernel does) but never says a word: an SMTP timeout."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(5)
        yield server.getsockname()[1]


def test_timeout_is_transient(settings: Any, outreach: Outreach, silent_server: int) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", silent_server, 0.3

    with pytest.raises(TransientError):
        send_outreach_email(outreach=outreach)


def test_connection_dropped_after_data_is_possibly_sent_not_transient(
    smtp_sink: SMTPSink, outreach: Outreach
) -> None:
    # given a mail server that stores the message, then drops the connection instead of "250"
    smtp_sink.drop_after_data = True
    # when we send, then the outcome is unknown, and says so: not a plain transient failure
    with pytest.raises(PossiblySent, match="after DATA"):
        send_outreach_email(outreach=outreach)
    assert len(smtp_sink.wait_for(1)) == 1  # the server does have it


def test_timeout_waiting_for_the_answer_to_data_is_possibly_sent(
    settings: Any, smtp_sink: SMTPSink, outreach: Outreach
) -> None:
    # given a server that takes longer to answer DATA than we wait
    smtp_sink.data_delay_s, settings.EMAIL_TIMEOUT = 1.5, 0.3
    with pytest.raises(PossiblySent):
        send_outreach_email(outreach=outreach)


def test_refusal_before_data_is_still_transient(smtp_sink: SMTPSink, outreach: Outreach) -> None:
    smtp_sink.refusals["pat@prospect.example"] = "451 4.3.0 try later"
    with pytest.raises(TransientError) as caught:
        send_outreach_email(outreach=outreach)
    assert not isinstance(caught.value, PossiblySent)


def test_send_dropped_after_data_is_resent_once_then_dead_lettered_possibly_sent(
    smtp_sink: SMTPSink, outreach: Outreach
) -> None:
    # given a server that keeps dropping the connection once it has the message
    smtp_sink.drop_after_data = True
    outreach.state = State.DISPATCHED
    outreach.save()
    # when the send runs, is put back, and runs again
    assert outreach_send(outreach_id=outreach.pk) == State.APPROVED
    Outreach.objects.filter(pk=outreach.pk).update(state=State.DISPATCHED)
    assert outreach_send(outreach_id=outreach.pk) == State.DEAD
    # then the prospect got at most two copies, both with one Message-ID, and a person decides
    outreach.refresh_from_db()
    ids = {m.message["Message-ID"] for m in smtp_sink.wait_for(2)}
    assert (len(smtp_sink.messages), ids) == (2, {outreach.message_id})
    assert DeadLetter.objects.get(outreach=outreach).failure_class == ErrorClass.POSSIBLY_SENT


def test_unsubscribe_token_round_trip() -> None:
    token = unsubscribe_token(lead_id=42)

    assert lead_id_from_token(token=token) == 42
    assert token == unsubscribe_token(lead_id=42)  # stable: old emails keep working


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: "43" + t[2:],  # someone else's id with our signature
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),
        lambda t: t.split(":")[0],
        lambda t: "",
        lambda t: signing.Signer(salt="another.purpose").sign("42"),
    ],
)
def test_tampered_token_is_rejected(tamper: Any) -> None:
    with pytest.raises(signing.BadSignature):
        lead_id_from_token(token=tamper(unsubscribe_token(lead_id=42)))


def test_token_without_a_lead_id_is_rejected() -> None:
    token = signing.Signer(salt="nurture.unsubscribe").sign("not-a-number")

    with pytest.raises(signing.BadSignature):
        lead_id_from_token(token=token)
