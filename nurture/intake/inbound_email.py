"""Inbound replies from email providers (django-anymail's inbound webhooks) into reply intake.

anymail has checked the request (HTTP basic auth, and the provider's own signature where it
has one) and parsed the email before `inbound_email_received` runs. This module only reads the
fields a reply needs, where it was sent (envelope recipient, To, Cc: a conversation's reply
address) and the provider's verdicts (nurture.intake.verdicts), and hands them to
`nurture.intake.replies`, the same validation and the same service (`reply_receive`) as our
JSON webhook; the belief rule there decides whether it is the lead's reply.

What a retry cannot fix returns normally, so anymail answers 200 and the provider stops: mail
from an address that is no lead naming no conversation (strangers, lists), mail not believed
(kept unverified for a person), or no usable reply. Anything unexpected (the database down)
raises: anymail answers 500, and providers retry those later.
"""

from __future__ import annotations

import hashlib
import logging
import re
from typing import Any

from anymail.inbound import AnymailInboundMessage
from anymail.signals import AnymailInboundEvent
from django.utils.html import strip_tags

from nurture.intake.belief import RECIPIENTS_READ, InboundReply, UnknownLead
from nurture.intake.replies import NotBelieved, PayloadError, reply_receive, reply_validate
from nurture.intake.triage.rules import TRIAGE_HEADERS
from nurture.intake.verdicts import verdicts_read
from nurture.mail.transport import message_ids

log = logging.getLogger(__name__)


def inbound_email_received(sender: Any, event: AnymailInboundEvent, esp_name: str, **_: Any) -> None:
    """anymail's `inbound` signal receiver (connected in nurture/apps.py)."""
    try:
        reply = inbound_reply(message=event.message, esp_event=event.esp_event, provider=esp_name)
        result = reply_receive(reply=reply)
    except (PayloadError, UnknownLead, NotBelieved) as exc:
        log.warning("inbound email via %s not answered: %s", esp_name, exc)
        return
    log.info(
        "inbound reply via %s: outreach %s (%s)",
        esp_name,
        result.outreach_id,
        "queued" if result.created else "a duplicate delivery",
        extra={"outreach_id": result.outreach_id},
    )


def inbound_reply(*, message: AnymailInboundMessage, esp_event: Any = None, provider: str) -> InboundReply:
    """The reply in a provider's parsed email; PayloadError names what is missing or wrong."""
    sender = message.from_email
    if sender is None or isinstance(sender, list):  # no From, or several: not someone's reply
        raise PayloadError("From", "the email has no single sender address")
    triage = _triage_fields(message)
    # A client may put comments or several ids in In-Reply-To: the first id is the parent. A
    # delivery report has none: the email it reports on is the one its quoted headers name.
    parents = message_ids(str(message["In-Reply-To"] or "")) or list(triage.pop("report_of"))
    return reply_validate(
        lead_email=sender.addr_spec,
        message_id=_message_id(message),
        subject=str(message.subject or ""),
        # The provider's reply without the quoted thread when it offers one (Mailgun, Postmark).
        body=message.stripped_text or message.text or strip_tags(message.html or ""),
        in_reply_to=parents[0] if parents else "",
        references=str(message["References"] or ""),
        recipients=_recipients(message),
        verdicts=verdicts_read(message=message, esp_event=esp_event),
        provider=provider,
        **{name: value for name, value in triage.items() if name != "report_of"},
    )


# A header's value as the rules read it; each header at most this many times.
_HEADER_CHARS = 200
_HEADER_TIMES = 3
_REPORT_RECIPIENTS = 20


def _triage_fields(message: AnymailInboundMessage) -> dict[str, Any]:
    """What triage's rules read (nurture.intake.triage.rules): the auto-reply and list
    headers, the content type and, for a delivery status report, its failed recipients."""
    headers = tuple(
        (name, str(value)[:_HEADER_CHARS])
        for name in TRIAGE_HEADERS
        for value in (message.get_all(name) or [])[:_HEADER_TIMES]
    )
    content_type = message.get_content_type()
    report_type = (
        str(message.get_param("report-type") or "").lower() if content_type == "multipart/report" else ""
    )
    report = report_type == "delivery-status"
    return {
        "headers": headers,
        "content_type": content_type,
        "report_type": report_type,
        "report_failed": _failed_recipients(message) if report else (),
        "report_of": _reported_message_id(message) if report else (),
    }


def _reported_message_id(message: AnymailInboundMessage) -> tuple[str, ...]:
    """The Message-ID of the email a delivery report returns (its text/rfc822-headers or
    message/rfc822 part), as a one-item tuple; () when it quotes none."""
    for part in message.walk():
        kind = part.get_content_type()
        if kind == "text/rfc822-headers":
            text = str(part.get_payload(decode=True) or b"", "utf-8", "replace") if part.get_payload() else ""
            found = re.search(r"^message-id:\s*(<[^>\s]{1,900}>)", text, re.IGNORECASE | re.MULTILINE)
            if found:
                return (found.group(1),)
        if kind == "message/rfc822":
            inner = part.get_payload()
            first = inner[0] if isinstance(inner, list) and inner else None
            ids = message_ids(str(first["Message-ID"] or "")) if first is not None else []
            if ids:
                return (ids[0],)
    return ()


def _failed_recipients(message: AnymailInboundMessage) -> tuple[str, ...]:
    """The Final-Recipient addresses whose Action is "failed" in an RFC 3464 report's
    message/delivery-status part (a delay or a relay is no bounce)."""
    found: list[str] = []
    for part in message.walk():
        if part.get_content_type() != "message/delivery-status":
            continue
        payload = part.get_payload()
        blocks = payload if isinstance(payload, list) else []
        for block in blocks:
            action = str(block.get("Action") or "").strip().lower()
            recipient = str(block.get("Final-Recipient") or block.get("Original-Recipient") or "")
            address = recipient.partition(";")[2].strip() or recipient.strip()
            if action == "failed" and "@" in address:
                found.append(address[:254].lower())
    return tuple(dict.fromkeys(found))[:_REPORT_RECIPIENTS]


def _recipients(message: AnymailInboundMessage) -> tuple[str, ...]:
    """Where the email was sent: the envelope recipient (the address the provider received it
    at), then To and Cc; each address once, the first RECIPIENTS_READ only."""
    addresses = [message.envelope_recipient or "", *(found.addr_spec for found in [*message.to, *message.cc])]
    return tuple(dict.fromkeys(address for address in addresses if address))[:RECIPIENTS_READ]


def _message_id(message: AnymailInboundMessage) -> str:
    """The email's Message-ID; without one, a stable stand-in from its content, so a provider's
    redelivery of the same email still finds the reply it created (the idempotency key)."""
    found = message_ids(str(message["Message-ID"] or ""))
    if found:
        return found[0]
    content = "\n".join(str(message[name] or "") for name in ("From", "Date", "Subject"))
    digest = hashlib.sha256(f"{content}\n{message.text or ''}".encode()).hexdigest()[:32]
    return f"<no-message-id.{digest}@inbound.invalid>"
