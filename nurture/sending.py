"""Sending one written email: intent recorded before SMTP, outcome after, SENT recorded once.

DISPATCHED -> SENDING is the claim: a second delivery of the same task loses it and sends
nothing, and it counts the try (`send_attempts`). A try whose outcome is unknown (the worker
died between the SMTP call and recording SENT; no answer after DATA; SENT could not be written
through a database outage) is resent once with the same Message-ID, then left to a person as
a "possibly sent" dead letter (orchestrator.dispatch.recovery.send_unconfirmed): at most two
copies, and the receiving side can drop the second by Message-ID.
"""

from __future__ import annotations

import logging

from django.db.models import F

from config.logging import outreach_log_context
from nurture.errors import OptedOut
from nurture.intake.sequence import sequence_gate
from nurture.mail import outreach_message_id, send_outreach_email
from nurture.retry_rules import fail
from orchestrator.dead_letters import replay_outcome_success
from outreach.models import Outreach, State
from outreach.transitions import TransitionLost, transition, transition_durably

log = logging.getLogger(__name__)


def outreach_send(*, outreach_id: int) -> State | None:
    """Send one dispatched draft; return the state it ends in (None: another delivery had it)."""
    outreach = Outreach.objects.select_related("lead__organization", "owner").get(pk=outreach_id)
    message_id = outreach.message_id or outreach_message_id(outreach=outreach)
    try:
        sending_claim(outreach_id=outreach_id, message_id=message_id)
    except TransitionLost:
        log.info("send skipped: not dispatched any more", extra=outreach_log_context(outreach))
        return None
    outreach.message_id = message_id
    gate = sequence_gate(outreach=outreach)
    if gate.stop:  # a reply or conversion landed after the draft was written
        transition(outreach_id=outreach_id, from_=State.SENDING, to=State.CANCELLED, note=gate.reason)
        return State.CANCELLED
    try:
        send_outreach_email(outreach=outreach)
    except OptedOut as exc:
        transition(outreach_id=outreach_id, from_=State.SENDING, to=State.CANCELLED, note=str(exc))
        return State.CANCELLED
    except Exception as exc:  # classified by nurture.retry_rules
        return fail(outreach=outreach, from_=State.SENDING, exc=exc, job_type="send")
    # The server has the email: a connection that died during SMTP must not leave the row
    # SENDING, or recovery would send it again.
    transition_durably(outreach_id=outreach_id, from_=State.SENDING, to=State.SENT, last_error="")
    replay_outcome_success(outreach_id=outreach_id)  # a replayed job that got this far succeeded
    return State.SENT


def sending_claim(*, outreach_id: int, message_id: str) -> None:
    """DISPATCHED -> SENDING with the Message-ID recorded before SMTP, counting the try (read by
    the resend-once rule). Raises TransitionLost if another delivery claimed it first."""
    transition(
        outreach_id=outreach_id,
        from_=State.DISPATCHED,
        to=State.SENDING,
        message_id=message_id,
        send_attempts=F("send_attempts") + 1,
    )
