"""What the mail side tells us about a lead: a hard bounce, a spam complaint, an unsubscribe.

Two ways in, one outcome (docs/email.md, "Bounces and complaints"):
- our SMTP server refuses the address for good while we send (nurture.errors.RecipientRefused,
  applied by nurture.retry_rules.fail): `send_refused`;
- an email provider reports a bounce or a complaint on its tracking webhook (django-anymail's
  `tracking` signal, connected in nurture.apps): `tracking_event_record`.
Either way nurture.sequence.lead_problem_record runs (as it does for a delivery failure notice
among the lead's replies, nurture.reply_actions): the lead is suppressed (never emailed again,
its queued work cancelled) and its owner's and sender domain's rates are checked, which may
pause them (orchestrator.controls.deliverability). A provider's unsubscribe event opts the lead
out (nurture.sequence.lead_opt_out), like our own unsubscribe link.

A provider's event belongs to the email it is about, found by the provider's id for it, then
by our Message-ID, then by address within the one organization that emailed it (`_email_of`):
the same person may be a lead of several organizations, and a complaint about one of them must
not stop another's conversation. A hard bounce is about the mailbox, so it suppresses the
address in every organization.
"""

from __future__ import annotations

import logging
from typing import Any

from anymail.signals import AnymailTrackingEvent, EventType, RejectReason
from django.db.models import F
from django.db.models.functions import Greatest

from nurture.mail.transport import message_id_bare
from nurture.sequence import lead_opt_out, lead_problem_record, leads_problem_record
from orchestrator.work import Pause
from outreach.models import DELIVERY_ATTEMPT, ErrorClass, Lead, Outreach, State
from outreach.transitions import transition

log = logging.getLogger(__name__)

# Provider events that mean "this address does not take mail": a bounce, or the provider
# refusing to try because it bounced before or is not an address at all.
_BOUNCE_REJECTS = (RejectReason.BOUNCED, RejectReason.INVALID)
# Events anymail normalises to "bounced" that are not hard bounces, by the provider's own field:
# Postmark's SoftBounce (a HardBounce may follow) and virus notices; SendGrid's "blocked" (a
# refusal by policy, often temporary). They must not suppress a lead or count in its rates.
_NOT_HARD = (("Type", "SoftBounce"), ("Type", "VirusNotification"), ("type", "blocked"))
_WHAT = {
    Lead.Status.BOUNCED: "hard bounce",
    Lead.Status.COMPLAINED: "spam complaint",
    Lead.Status.OPTED_OUT: "unsubscribe",
}


def send_refused(*, outreach: Outreach, reason: str) -> State:
    """The server refused the recipient for good during our send: nothing was sent (the try
    does not count towards the resend-once rule), the outreach is cancelled, the lead bounced."""
    transition(
        outreach_id=outreach.pk,
        from_=State.SENDING,
        to=State.CANCELLED,
        note=f"hard bounce: {reason}"[:2000],
        error_class=ErrorClass.PERMANENT,
        last_error=reason,
        send_attempts=Greatest(F("send_attempts") - 1, 0),
    )
    lead_problem_record(lead_id=outreach.lead_id, status=Lead.Status.BOUNCED, reason=f"hard bounce: {reason}")
    return State.CANCELLED


def tracking_event_record(*, event: AnymailTrackingEvent, esp_name: str) -> list[Pause] | None:
    """One provider event about one of our emails (`_email_of`): a hard bounce suppresses the
    address in every organization (the mailbox does not exist, whoever writes to it); a complaint
    or an unsubscribe suppresses only the lead of the organization that sent the email. Anything
    else (delivered, opened, a soft "deferred" bounce) is ignored. None: nothing to do."""
    status = _problem(event)
    if status is None or not event.recipient:
        return None
    attempts = _attempts_to(email=event.recipient)
    if not attempts:
        log.info(
            "%s %s event for %r: no lead emailed at that address", esp_name, event.event_type, event.recipient
        )
        return None
    email = _email_of(event=event, attempts=attempts)
    detail = event.description or event.mta_response or event.reject_reason or ""
    reason = f"{_WHAT[status]} reported by {esp_name}: {detail}"
    if status == Lead.Status.BOUNCED:
        return _address_bounced(email=event.recipient, about=email, attempts=attempts, reason=reason)
    if email is None:
        _not_applied(event=event, esp_name=esp_name, attempts=attempts)
        return None
    if status == Lead.Status.OPTED_OUT:
        _opted_out(lead_id=email.lead_id, reason=reason)
        return []
    return lead_problem_record(lead_id=email.lead_id, status=status, reason=reason)


def tracking_received(sender: Any, event: AnymailTrackingEvent, esp_name: str, **kwargs: Any) -> None:
    """django-anymail's `tracking` signal receiver (nurture.apps): an adapter, nothing more."""
    tracking_event_record(event=event, esp_name=esp_name)


def _problem(event: AnymailTrackingEvent) -> Lead.Status | None:
    if event.event_type == EventType.COMPLAINED:
        return Lead.Status.COMPLAINED
    if event.event_type == EventType.UNSUBSCRIBED:
        # SendGrid's unsubscribe and group_unsubscribe, Mailgun's unsubscribed, Postmark's
        # SubscriptionChange with SuppressSending (a resubscribe is SUBSCRIBED: ignored).
        return Lead.Status.OPTED_OUT
    if event.event_type == EventType.BOUNCED:
        esp = _dict(event.esp_event)
        return None if any(esp.get(key) == value for key, value in _NOT_HARD) else Lead.Status.BOUNCED
    if event.event_type == EventType.REJECTED and event.reject_reason in _BOUNCE_REJECTS:
        return Lead.Status.BOUNCED
    return None


def _address_bounced(
    *, email: str, about: Outreach | None, attempts: list[Outreach], reason: str
) -> list[Pause]:
    """A hard bounce: every lead at the address, in every organization, is bounced. The rates
    checked are those of the owner whose email bounced; when the event names none of our
    emails, those of every owner who emailed the address (each has a bounce in its window)."""
    lead_ids = list(Lead.objects.filter(email=email).order_by("id").values_list("id", flat=True))
    owners = [about.owner_id] if about is not None else [row.owner_id for row in attempts]
    return leads_problem_record(
        lead_ids=lead_ids, owner_ids=owners, status=Lead.Status.BOUNCED, reason=reason
    )


def _opted_out(*, lead_id: int, reason: str) -> None:
    """The person unsubscribed at the provider: the lead opts out (nurture.sequence.lead_opt_out,
    as our own unsubscribe link does); not a deliverability problem, so no rate is checked."""
    done = lead_opt_out(lead_id=lead_id, reason=reason)
    log.warning(
        "lead %s opted out (%s)%s: %d queued outreach cancelled",
        lead_id,
        reason,
        " already" if done.already else "",
        len(done.cancelled),
        extra={"lead_id": lead_id},
    )


def _not_applied(*, event: AnymailTrackingEvent, esp_name: str, attempts: list[Outreach]) -> None:
    organizations = sorted({row.lead.organization_id for row in attempts})
    log.warning(
        "%s %s event for %r not applied: %d organizations emailed it (%s) and the event names none "
        "of their emails (provider id %r)",
        esp_name,
        event.event_type,
        event.recipient,
        len(organizations),
        ", ".join(map(str, organizations)),
        event.message_id,
        extra={"organization_ids": organizations},
    )


def _attempts_to(*, email: str) -> list[Outreach]:
    """Our delivery attempts to this address, in every organization, latest first: the few
    emails a tracking event about it can be about."""
    return list(
        Outreach.objects.filter(DELIVERY_ATTEMPT, lead__email=email)
        .select_related("lead")
        .order_by("-state_changed_at", "-id")
    )


def _email_of(*, event: AnymailTrackingEvent, attempts: list[Outreach]) -> Outreach | None:
    """The email among `attempts` the event is about, or None when nothing says which.

    1. the provider's id for it (anymail's `message_id`) among the ids its send API answered
       (`esp_message_id`, space-separated when it answered several);
    2. the Message-ID header the provider reports, against ours (`_reported_message_ids`);
    3. the address alone, only when one organization emailed it (the latest of its emails).
    An address several organizations emailed is never guessed from: whoever emailed it last
    is not who the complaint was about.
    """
    provider_id = message_id_bare(event.message_id or "")
    if provider_id:
        for row in attempts:
            if provider_id in {message_id_bare(value) for value in row.esp_message_id.split()}:
                return row
    reported = _reported_message_ids(event)
    for row in attempts:
        if row.message_id and message_id_bare(row.message_id) in reported:
            return row
    if len({row.lead.organization_id for row in attempts}) == 1:
        return attempts[0]
    return None


def _reported_message_ids(event: AnymailTrackingEvent) -> set[str]:
    """The Message-ID header of the email, where the provider reports it: Mailgun's
    message.headers.message-id (which anymail gives as `message_id`), SendGrid's smtp-id,
    Amazon SES's mail.commonHeaders.messageId. Postmark reports only its own id."""
    esp = _dict(event.esp_event)
    found = (
        event.message_id,
        esp.get("smtp-id"),
        _dict(_dict(esp.get("mail")).get("commonHeaders")).get("messageId"),
    )
    return {message_id_bare(value) for value in found if isinstance(value, str) and message_id_bare(value)}


def _dict(value: Any) -> dict[str, Any]:
    """A provider's JSON object, or {} where it has something else (or nothing) there."""
    return value if isinstance(value, dict) else {}
