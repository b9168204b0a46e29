"""Which conversation an inbound email belongs to, and whether it is believed to be that lead's
reply: the one rule (`reply_believe`), for every way a reply arrives.

A conversation is a lead (hence its organization and owner). An email delivered by an email
provider is believed, and may be answered automatically, only when:

(a) it names a conversation: by the reply address it was sent to (`reply+<token>@<inbound
    domain>`, the Reply-To of every email we send; its envelope recipient, To or Cc) and/or by
    its In-Reply-To / References naming one of our Message-IDs; when both name one, it is the
    same (a reply sent to organization B's address that names organization A's email is not
    believed: B's address received it);
(b) its From, normalised like Lead.email, is that conversation's lead; and
(c) no authentication or spam verdict the provider gave failed (nurture.intake.verdicts).

Our tokens and Message-IDs are random (nurture.mail.transport), so naming a conversation needs
a copy of the email. What is not believed but claims a lead (a stranger on a real thread, a
forged From, spam, another organization's address, a lead's address naming no conversation:
the old sender-address fallback) is kept for a person (nurture.intake.unverified), never
answered. Mail from an address that is no lead and names no conversation is UnknownLead:
acknowledged and dropped, as before.

Our signed JSON webhook (`POST /hooks/replies/`) is an authenticated integration that asserts
`lead_email`: its reply is believed for that lead, found by its `in_reply_to` when it names one
of our emails (not believed when that email's lead is someone else), else by the address.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F, Max, Q

from nurture.intake.verdicts import Verdict
from nurture.mail.transport import message_id_bare, reply_token_of
from outreach.models import Lead, Outreach, State, UnverifiedInbound

# References read of an inbound email: the latest ones only (the parent is last). The rest is
# ignored: a header of thousands of guessed Message-IDs costs one lookup of this many.
REFERENCES_READ = 20
# Recipients read (envelope recipient first, then To and Cc), for the same reason.
RECIPIENTS_READ = 20

Reason = UnverifiedInbound.Reason


class UnknownLead(LookupError):
    """No lead has this email address, and the email names no conversation (404, or dropped)."""


@dataclass(frozen=True)
class InboundReply:
    lead_email: str  # the sender (From), as given
    message_id: str
    subject: str
    body: str
    # What the reply answers, each `<id>`: its In-Reply-To, and its References (oldest first,
    # at most REFERENCES_READ).
    in_reply_to: str = ""
    references: tuple[str, ...] = ()
    # Where it was sent (envelope recipient, To, Cc) and what the provider said about it.
    recipients: tuple[str, ...] = ()
    verdicts: tuple[Verdict, ...] = ()
    # The email provider that delivered it; "" for our signed JSON webhook, whose caller
    # asserts `lead_email`.
    provider: str = ""
    # What triage's rules read (nurture.intake.triage.rules), from providers' webhooks only:
    # the auto-reply and list headers (lower-case name, value), the email's content type and
    # report type, and for a delivery status report the recipients it says failed.
    headers: tuple[tuple[str, str], ...] = ()
    content_type: str = ""
    report_type: str = ""
    report_failed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Belief:
    """The lead whose reply it is (`lead`, when believed), or why it is not believed."""

    claimed: Lead | None  # whose reply it claims to be, believed or not
    organization_id: int | None
    reason: str = ""  # an UnverifiedInbound.Reason when not believed
    detail: str = ""

    @property
    def lead(self) -> Lead | None:
        return None if self.reason else self.claimed


def reply_believe(*, reply: InboundReply) -> Belief:
    """Believed (`.lead`) or not (`.reason`); raises UnknownLead when it claims no lead at all."""
    if not reply.provider:
        return _asserted(reply=reply)
    found = _conversation(reply=reply)
    if isinstance(found, Belief):
        return found
    if sender_normalised(reply.lead_email) != found.email:
        return _held(found, Reason.SENDER_NOT_LEAD, "From is not this conversation's lead")
    return _verdicts_held(found, reply=reply)


def report_believe(*, reply: InboundReply) -> Belief:
    """A delivery status report (a bounce notice, nurture.intake.triage.rules) is believed to
    be about a lead when it names the lead's conversation (rule a, usually by the original
    Message-ID it quotes) and, in place of rule (b), reports the lead's own address failed; a
    failed verdict holds it (rule c). A mailer daemon is never a lead, so From cannot count."""
    found = _conversation(reply=reply)
    if isinstance(found, Belief):
        return found
    if found.email not in {sender_normalised(address) for address in reply.report_failed}:
        return _held(found, Reason.SENDER_NOT_LEAD, "the delivery report is about another address")
    return _verdicts_held(found, reply=reply)


def _verdicts_held(found: Lead, *, reply: InboundReply) -> Belief:
    """Rule (c): held when a verdict the provider gave failed, else believed."""
    failed = [verdict for verdict in reply.verdicts if verdict.failed]
    if failed:
        spam = any(verdict.check in ("spam", "virus") for verdict in failed)
        said = ", ".join(f"{verdict.check}={verdict.result} ({verdict.source})" for verdict in failed)
        return _held(found, Reason.SPAM if spam else Reason.AUTHENTICATION, said)
    return Belief(found, found.organization_id)


def _conversation(*, reply: InboundReply) -> Lead | Belief:
    """Rule (a): the one lead the reply address and the thread name, or why not (held)."""
    by_token, unknown = _by_reply_address(reply.recipients)
    answered = _answered(reply=reply)
    by_id = answered.lead if answered is not None else None
    if len({lead.organization_id for lead in by_token}) > 1:
        return Belief(None, None, Reason.OTHER_CONVERSATION, "its reply addresses name several organizations")
    if len(by_token) > 1:
        return _held(by_token[0], Reason.OTHER_CONVERSATION, "its reply addresses name several conversations")
    if by_token and by_id is not None and by_id.pk != by_token[0].pk:
        # Believe the address that received it, not the thread it names: B's address got it.
        detail = "reply address and thread name different conversations"
        return _held(by_token[0], Reason.OTHER_CONVERSATION, detail)
    found = by_token[0] if by_token else by_id
    if unknown:
        claimed = found or lead_for_address(email=reply.lead_email)
        return _held(claimed, Reason.UNKNOWN_ADDRESS, "sent to a reply address we never gave out")
    if found is None:
        return _held(
            lead_for_address(email=reply.lead_email), Reason.NO_CONVERSATION, "names no email of ours"
        )
    return found


def _asserted(*, reply: InboundReply) -> Belief:
    """Our JSON webhook: the lead its caller names, in the conversation its in_reply_to names."""
    answered = _answered(reply=reply)
    if answered is None:
        lead = lead_for_address(email=reply.lead_email)
        return Belief(lead, lead.organization_id)
    if sender_normalised(reply.lead_email) != answered.lead.email:
        return _held(
            answered.lead, Reason.SENDER_NOT_LEAD, "lead_email is not the lead of in_reply_to's email"
        )
    return Belief(answered.lead, answered.lead.organization_id)


def _held(claimed: Lead, reason: str, detail: str) -> Belief:
    return Belief(claimed, claimed.organization_id, reason, detail)


def sender_normalised(address: str) -> str:
    """An address as Lead.email stores it (LeadEmailField: trimmed, lower-case)."""
    return str(Lead._meta.get_field("email").to_python(address))


def _by_reply_address(recipients: tuple[str, ...]) -> tuple[list[Lead], set[str]]:
    """The leads whose conversations the recipients' reply addresses name (each once, by id),
    and the tokens on our reply domain that name no conversation."""
    tokens = {token for token in map(reply_token_of, recipients) if token is not None}
    if not tokens:
        return [], set()
    rows = list(Outreach.objects.filter(reply_token__in=tokens).select_related("lead").order_by("lead_id"))
    leads = {row.lead_id: row.lead for row in rows}
    return list(leads.values()), tokens - {row.reply_token for row in rows}


def _answered(*, reply: InboundReply) -> Outreach | None:
    """Our email this reply answers: the one its In-Reply-To names, else the latest its
    References name (each `<id>` looked up in `_id_forms`)."""
    wanted = list(dict.fromkeys(filter(None, [reply.in_reply_to, *reversed(reply.references)])))
    forms = [_id_forms(value) for value in wanted]
    if not wanted:
        return None
    found = list(
        Outreach.objects.filter(Q(message_id__in=wanted) | Q(esp_message_id__in=set().union(*forms)))
        .select_related("lead")
        .order_by("-id")
    )
    for value, names in zip(wanted, forms, strict=True):
        for outreach in found:
            if outreach.message_id == value or outreach.esp_message_id in names:
                return outreach
    return None


def _id_forms(message_id: str) -> set[str]:
    """How a provider's id for our email may appear as `<id>` in a reply: as sent (Mailgun's
    ids have brackets), bare, or as the left part of a Message-ID the provider rewrote ours to
    (Amazon SES sends `<its id@region.amazonses.com>`)."""
    bare = message_id_bare(message_id)
    return {message_id, bare, bare.partition("@")[0]}


def lead_for_address(*, email: str) -> Lead:
    """The lead with this address; in several organizations, the one most recently emailed.

    Our JSON webhook's reply that names no email of ours answers the latest we sent; a
    provider's such email is kept unverified for that organization. Never emailed anywhere: the
    most recently created lead.
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
