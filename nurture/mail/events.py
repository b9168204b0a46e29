"""What the mail side tells us about a lead: a hard bounce or a spam complaint.

Two ways in, one outcome (docs/email.md, "Bounces and complaints"):
- our SMTP server refuses the address for good while we send (nurture.errors.RecipientRefused,
  applied by nurture.retry_rules.fail): `send_refused`;
- an email provider reports a bounce or a complaint on its tracking webhook (django-anymail's
  `tracking` signal, connected in nurture.apps): `tracking_event_record`.
Either way the lead is suppressed (nurture.sequence.lead_suppress: never emailed again,
its queued work cancelled) and its owner's and sender domain's rates are checked, which may
pause them (orchestrator.controls.deliverability).
"""

from __future__ import annotations

import logging
from typing import Any

from anymail.signals import AnymailTrackingEvent, EventType, RejectReason
from django.db import transaction
from django.db.models import F
from django.db.models.functions import Greatest

from nurture.sequence import lead_suppress
from orchestrator.work import Pause, deliverability_check
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


def lead_problem_record(*, lead_id: int, status: Lead.Status, reason: str) -> list[Pause]:
    """Suppress the lead, then pause its owner or sender domain if a rate is now too high."""
    with transaction.atomic():
        cancelled = lead_suppress(lead_id=lead_id, status=status, reason=reason[:500])
        owner_id = Lead.objects.values_list("owner_id", flat=True).get(pk=lead_id)
        pauses = deliverability_check(owner_id=owner_id)
    log.warning(
        "lead %s %s: %d queued outreach cancelled%s",
        lead_id,
        status,
        len(cancelled),
        "".join(f"; {p.scope_text()} paused: {p.reason}" for p in pauses),
        extra={"lead_id": lead_id, "owner_id": owner_id},
    )
    return pauses


def tracking_event_record(*, event: AnymailTrackingEvent, esp_name: str) -> list[Pause] | None:
    """One provider event: a bounce or complaint suppresses its recipient's lead; anything
    else (delivered, opened, a soft "deferred" bounce) is ignored. None: nothing to do."""
    status = _problem(event)
    if status is None or not event.recipient:
        return None
    lead_id = _lead_emailed(email=event.recipient)
    if lead_id is None:
        log.info(
            "%s %s event for %r: no lead emailed at that address", esp_name, event.event_type, event.recipient
        )
        return None
    detail = event.description or event.mta_response or event.reject_reason or ""
    what = "hard bounce" if status == Lead.Status.BOUNCED else "spam complaint"
    return lead_problem_record(
        lead_id=lead_id, status=status, reason=f"{what} reported by {esp_name}: {detail}"
    )


def tracking_received(sender: Any, event: AnymailTrackingEvent, esp_name: str, **kwargs: Any) -> None:
    """django-anymail's `tracking` signal receiver (nurture.apps): an adapter, nothing more."""
    tracking_event_record(event=event, esp_name=esp_name)


def _problem(event: AnymailTrackingEvent) -> Lead.Status | None:
    if event.event_type == EventType.COMPLAINED:
        return Lead.Status.COMPLAINED
    if event.event_type == EventType.BOUNCED:
        esp = event.esp_event if isinstance(event.esp_event, dict) else {}
        return None if any(esp.get(key) == value for key, value in _NOT_HARD) else Lead.Status.BOUNCED
    if event.event_type == EventType.REJECTED and event.reject_reason in _BOUNCE_REJECTS:
        return Lead.Status.BOUNCED
    return None


def _lead_emailed(*, email: str) -> int | None:
    """The lead at this address we emailed last (an address may be a lead of several
    organizations: the event is about the latest email, so about the one that sent it)."""
    return (
        Outreach.objects.filter(DELIVERY_ATTEMPT, lead__email=email)
        .order_by("-state_changed_at", "-id")
        .values_list("lead_id", flat=True)
        .first()
    )
