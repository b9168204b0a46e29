"""Inbound replies: the webhook's signature, its payload, and turning a reply into top-tier work.

Signature: `X-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">` keyed with
WEBHOOK_SECRET. The timestamp is inside the signed text, so a captured request cannot be
replayed once it is more than 5 minutes old (or re-dated); within the window a replay is a
duplicate delivery, which the message_id makes harmless.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import F, Max, Q

from nurture.intake.sequence import sequence_stop
from outreach.idempotency import reply_key
from outreach.models import Lead, Outreach, State
from outreach.services import outreach_enqueue
from outreach.transitions import transition

TOLERANCE_S = 300
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SignatureError(Exception):
    """The request is not provably from the provider (401)."""


class PayloadError(ValueError):
    """The body is not a valid reply (400); `field` names what is wrong."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class UnknownLead(LookupError):
    """No lead has this email address (404)."""


@dataclass(frozen=True)
class InboundReply:
    lead_email: str
    message_id: str
    subject: str
    body: str


@dataclass(frozen=True)
class ReplyReceived:
    outreach_id: int
    created: bool
    lead_id: int


def signature_header(*, body: bytes, secret: str, timestamp: int) -> str:
    """The header a sender computes (used by tests and documented in the README)."""
    return f"t={timestamp},v1={_mac(secret=secret, timestamp=str(timestamp), body=body)}"


def signature_verify(*, header: str | None, body: bytes, secret: str, now: float) -> None:
    """Raise SignatureError unless `header` signs `body` with `secret` within 5 minutes of `now`.

    Several v1 values are accepted (a sender rotating its secret signs with both).
    """
    if not secret:
        raise SignatureError("the server has no WEBHOOK_SECRET configured")
    if not header:
        raise SignatureError("the X-Signature header is missing")
    parts = [part.strip().partition("=") for part in header.split(",")]
    stamps = [value for key, _, value in parts if key == "t"]
    candidates = [value for key, _, value in parts if key == "v1" and _HEX64.match(value)]
    if len(stamps) != 1 or not stamps[0].isascii() or not stamps[0].isdigit() or len(stamps[0]) > 12:
        raise SignatureError("X-Signature must be t=<unix seconds>,v1=<hex HMAC-SHA256>")
    if not candidates:
        raise SignatureError("X-Signature has no v1=<64 hex digits> signature")
    if abs(now - int(stamps[0])) > TOLERANCE_S:
        raise SignatureError("X-Signature timestamp is more than 5 minutes from the server's clock")
    expected = _mac(secret=secret, timestamp=stamps[0], body=body)
    # Compare every candidate (no early exit) in constant time: timing reveals nothing.
    matches = [hmac.compare_digest(expected, candidate.lower()) for candidate in candidates]
    if not any(matches):
        raise SignatureError("X-Signature does not match the body")


def _mac(*, secret: str, timestamp: str, body: bytes) -> str:
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


def reply_payload_parse(*, raw: bytes) -> InboundReply:
    """`{lead_email, message_id, subject, body}` -> InboundReply; PayloadError names the bad field."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError too
        raise PayloadError("body", f"not valid JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise PayloadError("body", "expected a JSON object {lead_email, message_id, subject, body}")
    values = {name: _string(data, name) for name in ("lead_email", "message_id", "subject", "body")}
    email = values["lead_email"].strip()
    try:
        validate_email(email)
    except ValidationError:
        raise PayloadError("lead_email", "not a valid email address") from None
    message_id = values["message_id"].strip()
    if not message_id or _CONTROL.search(message_id):
        raise PayloadError("message_id", "must be a non-empty Message-ID without control characters")
    # NUL cannot be stored by PostgreSQL (text or jsonb) and means nothing in an email's text.
    subject, body = (values[name].replace("\x00", "") for name in ("subject", "body"))
    return InboundReply(lead_email=email, message_id=message_id, subject=subject, body=body)


def _string(data: dict[str, Any], name: str) -> str:
    if name not in data:
        raise PayloadError(name, "is missing")
    value = data[name]
    if not isinstance(value, str):
        raise PayloadError(name, f"must be a string, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate such as "\ud800": JSON allows it, UTF-8 does not
        raise PayloadError(name, "is not valid Unicode text") from None
    return value


def reply_receive(*, reply: InboundReply) -> ReplyReceived:
    """Queue one REPLY outreach per message_id, threaded to the last email sent, and stop the sequence.

    Duplicate deliveries (retries, concurrent ones) find the same key: the unique index lets one
    insert win, the others read its row, and only the winner changes the lead and its sequence.
    Raises UnknownLead.
    """
    lead = _lead_for(email=reply.lead_email)
    inbound = {"subject": reply.subject, "body": reply.body, "message_id": reply.message_id}
    with transaction.atomic():
        outreach, created = outreach_enqueue(
            lead=lead,
            kind=Outreach.Kind.REPLY,
            idempotency_key=reply_key(message_id=reply.message_id),
            context={"inbound": inbound},
            in_reply_to=_last_sent_message_id(lead_id=lead.pk),
        )
        if created:
            _reply_effects(lead=lead, outreach_id=outreach.pk)
    return ReplyReceived(outreach_id=outreach.pk, created=created, lead_id=lead.pk)


def _reply_effects(*, lead: Lead, outreach_id: int) -> None:
    Lead.objects.filter(id=lead.pk, status=Lead.Status.ACTIVE).update(status=Lead.Status.REPLIED)
    sequence_stop(lead_id=lead.pk, reason="lead replied: sequence stopped")
    if Lead.objects.filter(id=lead.pk, status=Lead.Status.OPTED_OUT).exists():
        # Recorded (the reply is visible in admin) but never answered by this system.
        transition(outreach_id=outreach_id, from_=State.QUEUED, to=State.CANCELLED, note="lead opted out")


def _lead_for(*, email: str) -> Lead:
    """The lead with this address; in several organizations, the one most recently emailed.

    A reply answers an email we sent, so the organization that sent the latest one is the one
    being answered. Never emailed anywhere: the most recently created lead.
    """
    lead = (
        # Case-insensitive: Lead.email (LeadEmailField) normalises the value looked up too.
        Lead.objects.filter(email=email)
        .annotate(last_sent=Max("outreach__sent_at", filter=Q(outreach__state=State.SENT)))
        .order_by(F("last_sent").desc(nulls_last=True), "-created_at", "-id")
        .first()
    )
    if lead is None:
        raise UnknownLead(f"no lead has the email address {email!r}")
    return lead


def _last_sent_message_id(*, lead_id: int) -> str:
    """The Message-ID of the last email sent to the lead: the reply threads under it."""
    sent = (
        Outreach.objects.filter(lead_id=lead_id, state=State.SENT)
        .order_by(F("sent_at").desc(nulls_last=True), "-id")
        .values_list("message_id", flat=True)
        .first()
    )
    return sent or ""
