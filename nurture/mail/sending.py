"""Sending one written email: intent recorded before SMTP, outcome after, SENT recorded once.

DISPATCHED -> SENDING is the claim: a second delivery of the same task loses it and sends
nothing, and it counts the try (`send_attempts`). A try whose outcome is unknown (the worker
died between the SMTP call and recording SENT; no answer after DATA; SENT could not be written
through a database outage) is resent once with the same Message-ID, then left to a person as
a "possibly sent" dead letter (orchestrator.failures.recovery.send_unconfirmed): at most two
copies, and the receiving side can drop the second by Message-ID.

Before the send budget, the mailbox (orchestrator.controls.mailboxes, through orchestrator.work):
the owner's next mailbox with room today and its spacing passed, the recipient's business hours
and the recipient domain's day; a hold sends the row back to APPROVED with `not_before` and
its reason, like the send budget's longer waits. The mailbox's message is given back whenever
the send budget's is given back.

Every email, approved or autonomous, leaves through here, so the send budget (the mail
provider's rate and each sender domain's day: orchestrator.budget.sends) is reserved here,
right before the claim: a short wait is slept off (the account bucket spaces sends evenly, so
waits are a fraction of a second), a longer one sends the row back to APPROVED with
`not_before` and the reason it waits, for the dispatcher to hand out again. A granted message
leaves SEND_ALIGN_S after its grant, from inside the open SMTP connection, so the varying
work in between does not bunch evenly spaced grants together at the provider. The reservation
is released after SMTP: kept when the message left or may have (PossiblySent), given back when
it never did (claim lost, opted out, stopped by the sequence, refused by the server).

A recipient the server or the email provider refuses for good (RecipientRefused) is a hard
bounce, not a failure to retry: CANCELLED, the lead suppressed, its rates checked
(nurture.mail.events.send_refused).
Every other failure goes to nurture.retry_rules.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import InterfaceError, OperationalError
from django.db.models import F
from django.utils import timezone

from config.logging import outreach_log_context
from nurture.errors import OptedOut, PipelineError, PossiblySent, RecipientRefused
from nurture.mail.events import send_refused
from nurture.mail.transport import outreach_message_id, reply_token_new, send_outreach_email, sender_domain
from nurture.retry_rules import fail, failure_reason
from nurture.sequence import sequence_gate
from orchestrator.work import (
    Budget,
    SendDenied,
    SendGrant,
    active_pause_scopes,
    get_budget,
    job_pause,
    mailbox_take,
    replay_outcome_success,
)
from outreach.models import Outreach, Prepared, State
from outreach.transitions import TransitionLost, transition, transition_durably

log = logging.getLogger(__name__)

# A send worker sleeps off a send-budget wait up to this long; beyond it the row goes back to
# APPROVED with `not_before` (the worker is a thread: a short sleep costs nothing).
MAX_SEND_WAIT_S = 5.0
# A granted message goes out this long after its grant, with the SMTP connection open: the
# work between (claim, sequence check, connecting) takes varying time, and the provider counts
# on arrival, so that spread would bunch evenly spaced grants together (bench/send_burst.py
# saw 21 in a second at 20/s). A constant delay shifts every send alike; only what is left
# after it (longer preparation, the SMTP commands) spreads.
SEND_ALIGN_S = 1.0


# The job's outreach with what sending it reads (its SQL compiled once: outreach.models.prepared)
_LOAD = Prepared(
    lambda pk: Outreach.objects.select_related("lead__organization", "owner", "mailbox").filter(pk=pk)
)


def outreach_send(*, outreach_id: int, budget: Budget | None = None) -> State | None:
    """Send one dispatched draft; return the state it ends in (None: another delivery had it)."""
    budget = budget or get_budget()
    outreach = _LOAD.get(pk=outreach_id)
    scopes = active_pause_scopes()
    if (stop := job_pause(outreach=outreach, scopes=scopes)) is not None:
        return _put_back(outreach=outreach, reason=stop.blocked_reason())
    mailbox = mailbox_take(outreach=outreach, budget=budget, scopes=scopes)
    if isinstance(mailbox, SendDenied):
        return send_later(outreach_id=outreach_id, denied=mailbox)
    message_id = outreach.message_id or outreach_message_id(outreach=outreach)
    reply_token = outreach.reply_token or reply_token_new()
    asked_ms = budget.clock_ms()  # the mailbox's spacing is on the budget's clock: so is its wait
    grant = send_budget_acquire(budget=budget, domain=sender_domain(outreach=outreach))
    if isinstance(grant, SendDenied):
        budget.mailbox_release(grant=mailbox)
        return send_later(outreach_id=outreach_id, denied=grant)
    budget.mailbox_defer(grant=mailbox, by_ms=budget.clock_ms() - asked_ms)
    slot = time.monotonic() + (SEND_ALIGN_S if grant.id and not grant.unmetered else 0.0)
    try:
        sending_claim(
            outreach_id=outreach_id,
            message_id=message_id,
            reply_token=reply_token,
            mailbox_id=mailbox.mailbox_id,
        )
    except TransitionLost:
        budget.release_send(reservation_id=grant.id, sent=False)
        budget.mailbox_release(grant=mailbox)
        log.info("send skipped: not dispatched any more", extra=outreach_log_context(outreach))
        return None
    outreach.message_id, outreach.reply_token = message_id, reply_token
    try:
        gate = sequence_gate(outreach=outreach)
    except (OperationalError, InterfaceError):
        # The database dropped the connection before SMTP (a failover, a restart, a proxy):
        # nothing left, so the try is not counted and the draft waits APPROVED, recorded on a
        # fresh connection. Still unreachable: back to the broker (nurture.tasks).
        budget.release_send(reservation_id=grant.id, sent=False)
        budget.mailbox_release(grant=mailbox)
        return _back_to_approved(
            outreach_id=outreach_id,
            note="database connection lost before SMTP: back to approved, the try not counted",
            reason="",
            from_=State.SENDING,
            send_attempts=F("send_attempts") - 1,
        )
    if gate.stop:  # a reply or conversion landed after the draft was written
        budget.release_send(reservation_id=grant.id, sent=False)
        budget.mailbox_release(grant=mailbox)
        transition(outreach_id=outreach_id, from_=State.SENDING, to=State.CANCELLED, note=gate.reason)
        return State.CANCELLED
    try:
        sent = send_outreach_email(
            outreach=outreach,
            before_send=lambda: time.sleep(max(0.0, slot - time.monotonic())),
            lead_status_now=gate.lead_status,
        )
    except OptedOut as exc:
        budget.release_send(reservation_id=grant.id, sent=False)
        budget.mailbox_release(grant=mailbox)
        transition(outreach_id=outreach_id, from_=State.SENDING, to=State.CANCELLED, note=str(exc))
        return State.CANCELLED
    except RecipientRefused as exc:  # a hard bounce, not a failure to replay (nurture.mail.events)
        budget.release_send(reservation_id=grant.id, sent=False)
        budget.mailbox_release(grant=mailbox)
        return send_refused(outreach=outreach, reason=failure_reason(exc))
    except Exception as exc:  # classified by nurture.retry_rules
        budget.release_send(reservation_id=grant.id, sent=_may_have_left(exc))
        if not _may_have_left(exc):
            budget.mailbox_release(grant=mailbox)
        return fail(outreach=outreach, from_=State.SENDING, exc=exc, job_type="send")
    budget.release_send(reservation_id=grant.id, sent=True)
    # The server has the email: a connection that died during SMTP must not leave the row
    # SENDING, or recovery would send it again.
    transition_durably(
        outreach_id=outreach_id,
        from_=State.SENDING,
        to=State.SENT,
        last_error="",
        esp_message_id=sent.esp_message_id[: Outreach._meta.get_field("esp_message_id").max_length],
        owner_timezone=outreach.owner.timezone,
    )
    replay_outcome_success(outreach_id=outreach_id)  # a replayed job that got this far succeeded
    return State.SENT


def send_budget_acquire(*, budget: Budget, domain: str) -> SendGrant | SendDenied:
    """One message of the send budget: granted now, after a short sleep, or denied with the
    wait and its reason when that is longer than MAX_SEND_WAIT_S."""
    answer = budget.reserve_send(domain=domain)
    waited = 0.0
    while isinstance(answer, SendDenied) and waited + answer.wait_ms / 1000 <= MAX_SEND_WAIT_S:
        time.sleep(answer.wait_ms / 1000)
        waited += answer.wait_ms / 1000
        answer = budget.reserve_send(domain=domain)
    return answer


def send_later(*, outreach_id: int, denied: SendDenied) -> State | None:
    """Back to APPROVED until the send budget has room, saying why (the dispatcher hands it out
    again after `not_before`). Not a failed attempt: nothing was tried."""
    return _back_to_approved(
        outreach_id=outreach_id,
        note=denied.reason,
        reason=denied.reason,
        not_before=timezone.now() + timedelta(milliseconds=denied.wait_ms),
    )


def _put_back(*, outreach: Outreach, reason: str) -> State | None:
    """Paused after dispatch: the written email waits APPROVED (sent after the resume with no
    LLM call again); None when another delivery had the row."""
    state = _back_to_approved(outreach_id=outreach.pk, note="paused", reason=reason)
    if state is not None:
        log.info("send put back: paused", extra=outreach_log_context(outreach))
    return state


def _back_to_approved(
    *,
    outreach_id: int,
    note: str,
    reason: str,
    not_before: datetime | None = None,
    from_: State = State.DISPATCHED,
    **fields: Any,
) -> State | None:
    """Back to APPROVED saying why it waits, no attempt charged (None: not ours any more)."""
    if not_before is not None:
        fields["not_before"] = not_before
    try:
        transition_durably(
            outreach_id=outreach_id,
            from_=from_,
            to=State.APPROVED,
            note=note,
            blocked_reason=reason[:200],
            **fields,
        )
    except TransitionLost:
        return None
    return State.APPROVED


def _may_have_left(exc: Exception) -> bool:
    """Whether a failed send may still have reached the provider, so its unit stays spent: yes
    after DATA without an answer, and for an unclassified error (the safe side); a refusal or a
    failure before connecting never left."""
    return isinstance(exc, PossiblySent) or not isinstance(exc, PipelineError)


def sending_claim(
    *, outreach_id: int, message_id: str, reply_token: str = "", mailbox_id: int | None = None
) -> None:
    """DISPATCHED -> SENDING with the Message-ID, the reply token and the mailbox recorded before
    SMTP (a resend reuses all three), counting the try (read by the resend-once rule). Raises
    TransitionLost if another delivery claimed it first."""
    tokens: dict[str, Any] = {"reply_token": reply_token} if reply_token else {}
    if mailbox_id is not None:
        tokens["mailbox_id"] = mailbox_id
    transition(
        outreach_id=outreach_id,
        from_=State.DISPATCHED,
        to=State.SENDING,
        message_id=message_id,
        **tokens,
        send_attempts=F("send_attempts") + 1,
        blocked_reason="",
    )
