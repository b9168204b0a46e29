"""Inbound replies: the webhook's signature, its payload, and turning a reply into top-tier work.

One home for every way a reply arrives: our signed JSON webhook (below) and the email
providers' inbound webhooks (nurture.intake.inbound_email) both end in `reply_receive`.
Whether a reply is the lead's, and which conversation it belongs to, is one rule
(nurture.intake.belief.reply_believe); what it does not believe is kept unverified for a person
(nurture.intake.unverified), who may accept it (`unverified_accept`), again through
`reply_receive`.

Signature: `X-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">` keyed with
WEBHOOK_SECRET. The timestamp is inside the signed text, so a captured request cannot be
replayed once it is more than 5 minutes old (or re-dated); within the window a replay is a
duplicate delivery, which the message_id makes harmless.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from nurture.intake.belief import REFERENCES_READ, InboundReply, reply_believe, report_believe
from nurture.intake.triage.intake import triage_settled_act
from nurture.intake.triage.rules import triage_rules
from nurture.intake.unverified import unverified_keep
from nurture.intake.verdicts import Verdict
from nurture.mail.transport import message_id_normalised, message_ids
from nurture.quiet import reply_due, reply_quiet_s
from nurture.reply_actions import ReplyTriage, reply_class_reopened
from nurture.sequence import sequence_stop
from outreach.idempotency import reply_key
from outreach.models import SUPPRESSED, Lead, Organization, Outreach, ReplyClass, State, UnverifiedInbound
from outreach.services.operations import NotActionable
from outreach.services.queue import outreach_enqueue
from outreach.transitions import REPLY_JOINABLE, transition

log = logging.getLogger(__name__)

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


class NotBelieved(LookupError):
    """Not believed to be its lead's reply (nurture.intake.belief): kept unverified, not answered."""

    def __init__(self, *, unverified_id: int, reason: str) -> None:
        super().__init__(
            f"not believed to be the lead's reply ({reason}): kept as unverified #{unverified_id}"
        )
        self.unverified_id = unverified_id
        self.reason = reason


@dataclass(frozen=True)
class ReplyReceived:
    outreach_id: int
    created: bool
    lead_id: int
    joined: bool = False  # added to the lead's answer not written yet (one answer per turn)


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
    """`{lead_email, message_id, subject, body[, in_reply_to]}` -> InboundReply; PayloadError
    names the bad field."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError too
        raise PayloadError("body", f"not valid JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise PayloadError("body", "expected a JSON object {lead_email, message_id, subject, body}")
    values: dict[str, Any] = {
        name: _string(data, name) for name in ("lead_email", "message_id", "subject", "body")
    }
    # Optional (added later): the Message-ID the prospect answered; absent = the last one we sent.
    in_reply_to = _string(data, "in_reply_to") if "in_reply_to" in data else ""
    return reply_validate(**values, in_reply_to=in_reply_to)


def reply_validate(
    *,
    lead_email: str,
    message_id: str,
    subject: str,
    body: str,
    in_reply_to: str = "",
    references: str = "",
    recipients: tuple[str, ...] = (),
    verdicts: tuple[Verdict, ...] = (),
    provider: str = "",
    headers: tuple[tuple[str, str], ...] = (),
    content_type: str = "",
    report_type: str = "",
    report_failed: tuple[str, ...] = (),
) -> InboundReply:
    """Check and normalise one inbound reply, however it arrived; PayloadError names the bad field.

    References keeps its latest REFERENCES_READ ids: the rest is never looked up."""
    email = lead_email.strip()
    try:
        validate_email(email)
    except ValidationError:
        raise PayloadError("lead_email", "not a valid email address") from None
    message_id = message_id.strip()
    if not message_id or _CONTROL.search(message_id):
        raise PayloadError("message_id", "must be a non-empty Message-ID without control characters")
    parent = message_id_normalised(in_reply_to) if in_reply_to.strip() else ""
    if parent is None:
        raise PayloadError("in_reply_to", "must be one Message-ID such as <abc@example.com>")
    # NUL cannot be stored by PostgreSQL (text or jsonb) and means nothing in an email's text.
    subject, body = (text.replace("\x00", "") for text in (subject, body))
    return InboundReply(
        lead_email=email,
        message_id=message_id,
        subject=subject,
        body=body,
        in_reply_to=parent,
        references=tuple(message_ids(references)[-REFERENCES_READ:]),
        recipients=recipients,
        verdicts=verdicts,
        provider=provider,
        headers=headers,
        content_type=content_type,
        report_type=report_type,
        report_failed=report_failed,
    )


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


def reply_receive(*, reply: InboundReply, lead: Lead | None = None) -> ReplyReceived:
    """Queue one REPLY outreach per conversation turn in the conversation it answers, and stop
    the sequence; or, for what triage's rules settle (nurture.intake.triage), record the
    reply with its class, act on it at once and queue nothing.

    `lead` None: the belief rule decides whose reply it is (nurture.intake.belief; a delivery
    report by `report_believe`); one it does not believe is kept unverified and raises
    NotBelieved. A `lead` given is a person's decision (`unverified_accept`).

    The answer threads under the prospect's message: its in_reply_to is their Message-ID, its
    references the thread above (`_thread`). One answer per turn: a message that arrives while
    our answer to the lead is not written yet joins that answer (`_reply_join`) instead of
    queueing a second one. One answer per burst: the answer is due a quiet period after the
    lead's last message (nurture.quiet): queued `quiet` seconds out, and each message that joins
    it while queued pushes it out again. Intake for one lead runs one at a time (the lead's row
    is locked), so two messages arriving together cannot both find no pending answer. Duplicate deliveries
    (retries, concurrent ones) find the message already recorded, as a reply's key or among its
    joined messages: nothing changes twice. Raises UnknownLead, NotBelieved.
    """
    settled = triage_rules(reply=reply, today=timezone.now().date())
    if lead is None:
        lead = _believed_lead(reply=reply, settled=settled)
    # The believed lead is known from here on (the rule's, or a person's acceptance).
    inbound = {"subject": reply.subject, "body": reply.body, "message_id": reply.message_id}
    their_id = _threadable(reply.message_id)
    with transaction.atomic():
        Lead.objects.select_for_update().filter(id=lead.pk).values_list("id", flat=True).get()
        # Read under the lead's lock, with the message's arrival: the clock of its quiet period.
        arrived, quiet_s = timezone.now(), _quiet_s(lead=lead)
        key = reply_key(message_id=reply.message_id)
        if (seen := _received(lead_id=lead.pk, key=key, message_id=reply.message_id)) is not None:
            return ReplyReceived(outreach_id=seen, created=False, lead_id=lead.pk)
        # What the rules settle (an auto-reply, a bounce, an opt-out) joins no answer: it is
        # recorded on its own and acted on below.
        if (
            settled is None
            and (pending := _reply_join(lead_id=lead.pk, inbound=inbound, arrived=arrived, quiet_s=quiet_s))
            is not None
        ):
            return ReplyReceived(outreach_id=pending, created=False, lead_id=lead.pk, joined=True)
        outreach, created = outreach_enqueue(
            lead=lead,
            kind=Outreach.Kind.REPLY,
            idempotency_key=key,
            not_before=reply_due(last_message_at=arrived, quiet_s=quiet_s),
            context={"inbound": inbound},
            in_reply_to=their_id or "",
            references=" ".join(_thread(reply=reply, lead_id=lead.pk)) if their_id else "",
        )
        if created and settled is not None:
            triage_settled_act(reply=outreach, triage=settled)
        elif created:
            _reply_effects(lead=lead, outreach_id=outreach.pk)
    return ReplyReceived(outreach_id=outreach.pk, created=created, lead_id=lead.pk)


def _believed_lead(*, reply: InboundReply, settled: ReplyTriage | None) -> Lead:
    report = settled is not None and settled.reply_class == ReplyClass.BOUNCE_NOTICE
    belief = report_believe(reply=reply) if report else reply_believe(reply=reply)
    if belief.lead is None:
        held = unverified_keep(reply=reply, belief=belief)
        raise NotBelieved(unverified_id=held.pk, reason=belief.reason)
    return belief.lead


def unverified_accept(*, unverified_id: int, by_id: int) -> ReplyReceived:
    """A person accepts a held email as its claimed lead's reply: the normal reply intake runs
    for that lead, and who accepted it, when, and the reply it became are recorded. Raises
    NotActionable (the operators' actions' refusal) when it was accepted already or claims no lead."""
    with transaction.atomic():
        held = (
            UnverifiedInbound.objects.select_for_update(of=("self",))
            .select_related("lead")
            .get(pk=unverified_id)
        )
        if held.status != UnverifiedInbound.Status.HELD:
            raise NotActionable(f"#{held.pk} was accepted already")
        if held.lead is None:
            raise NotActionable(f"#{held.pk} names no lead to accept it for")
        result = reply_receive(reply=_held_reply(held=held, lead=held.lead), lead=held.lead)
        UnverifiedInbound.objects.filter(pk=held.pk).update(
            status=UnverifiedInbound.Status.ACCEPTED,
            accepted_by_id=by_id,
            accepted_at=timezone.now(),
            outreach_id=result.outreach_id,
        )
    log.info("unverified inbound #%s accepted by user %s as lead %s's reply", held.pk, by_id, held.lead.pk)
    return result


def _held_reply(*, held: UnverifiedInbound, lead: Lead) -> InboundReply:
    return InboundReply(
        lead_email=lead.email,
        message_id=held.message_id,
        subject=held.subject,
        body=held.body,
        in_reply_to=held.in_reply_to,
        references=tuple(message_ids(held.references)),
        provider=held.provider,
    )


# An answer not written yet: a later message can still be in it. DISPATCHED also holds drafts
# on their way to SMTP, hence the empty-draft condition too.


def _quiet_s(*, lead: Lead) -> int:
    organization = Organization.objects.only("reply_quiet_s").get(pk=lead.organization_id)
    return reply_quiet_s(organization=organization)


def _reply_join(*, lead_id: int, inbound: dict[str, str], arrived: datetime, quiet_s: int) -> int | None:
    """Add `inbound` to the lead's reply whose draft is not written yet; its id, or None.

    A reply still QUEUED waits again: due `quiet_s` after this message (never earlier than it
    was). One already taken by the dispatcher is being written: its due time, what its latency
    counts from, stays; a draft discarded for this message waits anew (nurture.writing.generation).
    A class the model gave it (an earlier job's, put back in the queue since) was decided
    without this message: emptied, so the next job classifies again (`reply_class_reopened`).

    The row lock orders this against the generation worker recording a draft (a guarded
    transition on `inbound_joined`, nurture.writing.generation): either the join lands first and that
    draft, written without this text, is discarded and written again; or the draft lands first,
    the row no longer matches, and this message starts the next turn.
    """
    pending = (
        Outreach.objects.select_for_update()
        .filter(lead_id=lead_id, kind=Outreach.Kind.REPLY, state__in=REPLY_JOINABLE, draft_body="")
        .order_by("id")
        .first()
    )
    if pending is None:
        return None
    context = pending.context if isinstance(pending.context, dict) else {}
    joined = [*context.get("joined", []), inbound]
    fields: dict[str, Any] = {
        "context": {**context, "joined": joined},
        "inbound_joined": F("inbound_joined") + 1,
        **reply_class_reopened(),
    }
    if pending.state == State.QUEUED:  # locked above: the dispatcher cannot claim it meanwhile
        fields["not_before"] = reply_due(
            last_message_at=arrived, quiet_s=quiet_s, not_before=pending.not_before
        )
    Outreach.objects.filter(id=pending.pk).update(**fields)
    log.info(
        "reply %s: a later message from lead %s joined it (%d joined)",
        pending.pk,
        lead_id,
        len(joined),
        extra={"outreach_id": pending.pk, "lead_id": lead_id},
    )
    return pending.pk


def _received(*, lead_id: int, key: str, message_id: str) -> int | None:
    """The reply that already holds this message (a duplicate delivery): by its key, or among
    the messages joined into the lead's replies (a handful of rows: read and looked at here)."""
    found = Outreach.objects.filter(idempotency_key=key).values_list("id", flat=True).first()
    if found is not None:
        return found
    rows = Outreach.objects.filter(lead_id=lead_id, kind=Outreach.Kind.REPLY, inbound_joined__gt=0)
    for outreach_id, context in rows.values_list("id", "context"):
        joined = context.get("joined", []) if isinstance(context, dict) else []
        if any(isinstance(m, dict) and m.get("message_id") == message_id for m in joined):
            return outreach_id
    return None


def _threadable(message_id: str) -> str | None:
    """Their Message-ID as `<id>` for our In-Reply-To, or None: one we cannot put in a header
    (no `<id>` form) or store (longer than the column) leaves our answer unthreaded."""
    parent = message_id_normalised(message_id)
    limit = Outreach._meta.get_field("in_reply_to").max_length or 0
    return parent if parent is not None and len(parent) <= limit else None


# References kept on our answer: the first id (the thread's root) and the latest ones. Long
# threads would otherwise grow the header without limit (RFC 5322 3.6.4 allows trimming).
MAX_REFERENCES = 10


def _thread(*, reply: InboundReply, lead_id: int) -> list[str]:
    """The References above the prospect's message, oldest first: what their message carried
    (its References, else its In-Reply-To), or, when it said nothing, our last email to them."""
    chain = list(reply.references) or ([reply.in_reply_to] if reply.in_reply_to else [])
    if not chain:
        chain = message_ids(_last_sent_message_id(lead_id=lead_id))
    if len(chain) > MAX_REFERENCES - 1:
        chain = [chain[0], *chain[-(MAX_REFERENCES - 2) :]]
    return chain


def _reply_effects(*, lead: Lead, outreach_id: int) -> None:
    Lead.objects.filter(id=lead.pk, status=Lead.Status.ACTIVE).update(status=Lead.Status.REPLIED)
    sequence_stop(lead_id=lead.pk, reason="lead replied: sequence stopped")
    if Lead.objects.filter(id=lead.pk, status__in=SUPPRESSED).exists():
        # Recorded (the reply is visible in admin) but never answered by this system.
        transition(outreach_id=outreach_id, from_=State.QUEUED, to=State.CANCELLED, note="lead opted out")


def _last_sent_message_id(*, lead_id: int) -> str:
    """The Message-ID of the last email sent to the lead: the reply threads under it."""
    sent = (
        Outreach.objects.filter(lead_id=lead_id, state=State.SENT)
        .order_by(F("sent_at").desc(nulls_last=True), "-id")
        .values_list("message_id", flat=True)
        .first()
    )
    return sent or ""
