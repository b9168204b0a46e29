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
from typing import Any

from anymail.inbound import AnymailInboundMessage
from anymail.signals import AnymailInboundEvent
from django.utils.html import strip_tags

from nurture.intake.belief import RECIPIENTS_READ, InboundReply, UnknownLead
from nurture.intake.replies import NotBelieved, PayloadError, reply_receive, reply_validate
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
    # A client may put comments or several ids in In-Reply-To: the first id is the parent.
    parents = message_ids(str(message["In-Reply-To"] or ""))
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
    )


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
