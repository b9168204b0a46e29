"""What a failed generation or send does next, decided in one place by the error's class.

- RateLimited (the provider said 429) or Paced (our own pacer says the window is full): back
  to the queue with `not_before` = the wait; not a failed attempt. Never slept off in a worker.
  A provider that keeps refusing is not waited on for ever: after RETRY_MAX_RATE_LIMITED
  re-queues for 429 (since the last replay) the next 429 is a dead letter saying so.
- PossiblySent (no answer from the mail server after DATA): it may have the email. Resent once
  with the same Message-ID, then a POSSIBLY_SENT dead letter (recovery.send_unconfirmed).
- TransientError (5xx, timeouts, connection errors, anything unclassified): attempts + 1 and
  back to the queue with exponential backoff and jitter, until RETRY_MAX_ATTEMPTS; then DEAD.
- ConfigurationFault (401/403/404: the deployment's key, permission or model): back to the queue
  uncharged with a blocked reason; the deployment's breaker holds its work until a probe succeeds.
- RecipientRefused (the recipient's server refused the address for good): a hard bounce, not
  a failure to replay: CANCELLED, the lead suppressed, its rates checked (nurture.mail_events).
- PermanentError (400/422, policy, other SMTP 5xx): DEAD at once.
"Back to the queue" is QUEUED for work without a draft and APPROVED for a written draft: a
retry never pays the LLM twice for an email it already has.
"""

from __future__ import annotations

import logging
import random
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from config.logging import outreach_log_context
from nurture.errors import (
    ConfigurationFault,
    PermanentError,
    PipelineError,
    PolicyViolation,
    PossiblySent,
    RateLimited,
    RecipientRefused,
    TransientError,
)
from nurture.mail_events import send_refused
from orchestrator.dead_letters import dead_letter
from orchestrator.dispatch.recovery import send_unconfirmed
from outreach.models import ErrorClass, Outreach, State
from outreach.transitions import transition

log = logging.getLogger(__name__)

BACKOFF_CAP_S = 900.0
# A job refused for its deployment's configuration waits this long before the dispatcher looks
# at it again: long enough that the few calls before the breaker opens are not a hot loop.
CONFIGURATION_FAULT_RECHECK_S = 5.0


class Paced(PipelineError):
    """Our call-time pacer says the provider window is full for longer than a worker should wait."""

    error_class = ""

    def __init__(self, *, wait_s: float, cause: str = "provider window full") -> None:
        super().__init__(f"{cause} for {wait_s:.1f}s: re-queued")
        self.wait_s = wait_s


def backoff_s(*, attempt: int, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter: base * 2^(attempt-1), capped, then scaled by U(0.5, 1)."""
    ceiling = min(BACKOFF_CAP_S, settings.RETRY_BACKOFF_BASE_S * 2 ** max(0, attempt - 1))
    return ceiling * (rng or random).uniform(0.5, 1.0)


def fail(*, outreach: Outreach, from_: State, exc: BaseException, job_type: str) -> State:
    """Apply the rule for `exc` to an outreach in `from_`; return the state it ended in."""
    retry_to = State.APPROVED if outreach.draft_body else State.QUEUED
    now = timezone.now()
    if isinstance(exc, RateLimited) and outreach.rate_limited >= settings.RETRY_MAX_RATE_LIMITED:
        reason = (
            f"the provider kept refusing: 429 {outreach.rate_limited + 1} times "
            f"(cap RETRY_MAX_RATE_LIMITED={settings.RETRY_MAX_RATE_LIMITED}); last: {_reason(exc)}"
        )
        dead_letter(
            outreach=outreach,
            from_=from_,
            failure_class=ErrorClass.RATE_LIMITED,
            reason=reason,
            job_type=job_type,
        )
        return State.DEAD
    if isinstance(exc, RateLimited | Paced):
        wait = exc.retry_after_s if isinstance(exc, RateLimited) else exc.wait_s
        counted: dict[str, Any] = (
            {"rate_limited": F("rate_limited") + 1} if isinstance(exc, RateLimited) else {}
        )
        transition(
            outreach_id=outreach.pk,
            from_=from_,
            to=retry_to,
            note=str(exc),
            error_class=exc.error_class,
            not_before=now + timedelta(seconds=wait),
            reservation_id="",
            **counted,
        )
        return retry_to
    if isinstance(exc, ConfigurationFault):
        # The deployment's fault, not the job's: back to the queue uncharged, saying why. The
        # dispatcher holds it there while the deployment's breaker is open (routing.health).
        transition(
            outreach_id=outreach.pk,
            from_=from_,
            to=retry_to,
            note=str(exc),
            blocked_reason=str(exc)[:200],
            not_before=now + timedelta(seconds=CONFIGURATION_FAULT_RECHECK_S),
            reservation_id="",
            llm_route="",
        )
        return retry_to
    if isinstance(exc, PossiblySent) and from_ == State.SENDING:
        return send_unconfirmed(
            outreach=outreach,
            why=_reason(exc),
            error_class=ErrorClass.POSSIBLY_SENT,
            attempts=outreach.attempts + 1,
            last_error=_reason(exc),
            not_before=now + timedelta(seconds=backoff_s(attempt=outreach.attempts + 1)),
        )
    if isinstance(exc, RecipientRefused) and from_ == State.SENDING:
        return send_refused(outreach=outreach, reason=_reason(exc))
    if isinstance(exc, PermanentError):
        failure = ErrorClass.POLICY if isinstance(exc, PolicyViolation) else ErrorClass.PERMANENT
        dead_letter(
            outreach=outreach, from_=from_, failure_class=failure, reason=_reason(exc), job_type=job_type
        )
        return State.DEAD
    attempts = outreach.attempts + 1
    if attempts >= settings.RETRY_MAX_ATTEMPTS:
        reason = f"{_reason(exc)} (attempt {attempts} of {settings.RETRY_MAX_ATTEMPTS}: giving up)"
        dead_letter(
            outreach=outreach,
            from_=from_,
            failure_class=ErrorClass.EXHAUSTED,
            reason=reason,
            job_type=job_type,
        )
        return State.DEAD
    delay = backoff_s(attempt=attempts)
    # The server refused or was never reached: this try certainly did not send, so it does not
    # count towards the resend-once rule (send_attempts counts tries that may have arrived).
    # (Greatest: a row put in SENDING by hand, never claimed, has nothing to give back.)
    uncounted: dict[str, Any] = (
        {"send_attempts": Greatest(F("send_attempts") - 1, 0)} if from_ == State.SENDING else {}
    )
    transition(
        outreach_id=outreach.pk,
        from_=from_,
        to=retry_to,
        note=f"{_reason(exc)}; retry in {delay:.0f}s",
        error_class=ErrorClass.TRANSIENT,
        attempts=attempts,
        last_error=_reason(exc),
        not_before=now + timedelta(seconds=delay),
        reservation_id="",
        **uncounted,
    )
    if not isinstance(exc, TransientError):
        log.error(
            "unclassified failure treated as transient", exc_info=exc, extra=outreach_log_context(outreach)
        )
    return retry_to


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]
