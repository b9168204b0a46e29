"""What a failed generation or send does next, decided in one place by the error's class.

Each rule is one row of RULES (the error's class, an optional condition, the handler); the
first row that matches decides, and anything no row matches is retried as transient:

- RateLimited (the provider said 429) or Paced (our own pacer says the window is full): back
  to the queue with `not_before` = the wait; not a failed attempt. (The generation job waits off
  the first 429 of a call in the worker when its Retry-After is at most 5 s, and only a second
  one in a row, or a longer wait, reaches this rule: nurture.writing.generation._call.)
  A provider that keeps refusing is not waited on for ever: after RETRY_MAX_RATE_LIMITED
  re-queues for 429 (since the last replay) the next 429 is a dead letter saying so.
- PossiblySent (no answer from the mail server after DATA; an email provider's 5xx, or its
  connection lost after the request went out): it may have the email. Resent once
  with the same Message-ID, then a POSSIBLY_SENT dead letter (recovery.send_unconfirmed).
- TransientError (5xx, timeouts, connection errors, anything unclassified): attempts + 1 and
  back to the queue with exponential backoff and jitter, until RETRY_MAX_ATTEMPTS; then DEAD.
- ConfigurationFault (401/403/404: the deployment's key, permission or model; 400
  unsupported_parameter: its dialect, e.g. max_tokens sent to a reasoning model): back to the queue
  uncharged with a blocked reason; the deployment's breaker holds its work until a probe succeeds.
- PermanentError (other 400s, 422, policy, other SMTP 5xx): DEAD at once.
"Back to the queue" is QUEUED for work without a draft and APPROVED for a written draft: a
retry never pays the LLM twice for an email it already has.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import F
from django.db.models.functions import Greatest
from django.utils import timezone

from config.logging import outreach_log_context
from nurture.errors import (
    ConfigurationFault,
    Paced,
    PermanentError,
    PolicyViolation,
    PossiblySent,
    RateLimited,
    TransientError,
)
from orchestrator.work import attempts_exhausted, dead_letter, send_unconfirmed
from outreach.models import ErrorClass, Outreach, State
from outreach.transitions import back_to_queue, transition

log = logging.getLogger(__name__)

BACKOFF_CAP_S = 900.0
# A job refused for its deployment's configuration waits this long before the dispatcher looks
# at it again: long enough that the few calls before the breaker opens are not a hot loop.
CONFIGURATION_FAULT_RECHECK_S = 5.0


def backoff_s(*, attempt: int, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter: base * 2^(attempt-1), capped, then scaled by U(0.5, 1)."""
    ceiling = min(BACKOFF_CAP_S, settings.RETRY_BACKOFF_BASE_S * 2 ** max(0, attempt - 1))
    return ceiling * (rng or random).uniform(0.5, 1.0)


@dataclass(frozen=True)
class Failure:
    """One failed try, as the rules see it."""

    outreach: Outreach
    from_: State
    exc: BaseException
    job_type: str
    now: datetime

    @property
    def reason(self) -> str:
        return failure_reason(self.exc)

    @property
    def retry_to(self) -> State:
        return back_to_queue(self.outreach)


def fail(*, outreach: Outreach, from_: State, exc: BaseException, job_type: str) -> State:
    """Apply the rule for `exc` to an outreach in `from_`; return the state it ended in."""
    failure = Failure(outreach=outreach, from_=from_, exc=exc, job_type=job_type, now=timezone.now())
    for kind, applies, handler in RULES:
        if isinstance(exc, kind) and (applies is None or applies(failure)):
            return handler(failure)
    return _retry_later(failure)


def failure_reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:2000]


def _dead(failure: Failure, *, failure_class: ErrorClass, reason: str) -> State:
    dead_letter(
        outreach=failure.outreach,
        from_=failure.from_,
        failure_class=failure_class,
        reason=reason,
        job_type=failure.job_type,
    )
    return State.DEAD


def _refused_too_often(failure: Failure) -> State:
    """A provider that keeps answering 429 is not waited on for ever."""
    count, cap = failure.outreach.rate_limited + 1, settings.RETRY_MAX_RATE_LIMITED
    reason = f"the provider kept refusing: 429 {count} times (cap RETRY_MAX_RATE_LIMITED={cap}); last: {failure.reason}"
    return _dead(failure, failure_class=ErrorClass.RATE_LIMITED, reason=reason)


def _wait_for_window(failure: Failure) -> State:
    """429 or our pacer: back to the queue after the wait, not a failed attempt."""
    exc = failure.exc
    assert isinstance(exc, RateLimited | Paced)
    wait = exc.retry_after_s if isinstance(exc, RateLimited) else exc.wait_s
    counted: dict[str, Any] = {"rate_limited": F("rate_limited") + 1} if isinstance(exc, RateLimited) else {}
    transition(
        outreach_id=failure.outreach.pk,
        from_=failure.from_,
        to=failure.retry_to,
        note=str(exc),
        error_class=exc.error_class,
        not_before=failure.now + timedelta(seconds=wait),
        reservation_id="",
        **counted,
    )
    return failure.retry_to


def _hold_for_deployment(failure: Failure) -> State:
    """The deployment's fault, not the job's: back to the queue uncharged, saying why. The
    dispatcher holds it there while the deployment's breaker is open."""
    transition(
        outreach_id=failure.outreach.pk,
        from_=failure.from_,
        to=failure.retry_to,
        note=str(failure.exc),
        blocked_reason=str(failure.exc)[:200],
        not_before=failure.now + timedelta(seconds=CONFIGURATION_FAULT_RECHECK_S),
        reservation_id="",
        llm_route="",
    )
    return failure.retry_to


def _resend_once(failure: Failure) -> State:
    attempts = failure.outreach.attempts + 1
    return send_unconfirmed(
        outreach=failure.outreach,
        why=failure.reason,
        error_class=ErrorClass.POSSIBLY_SENT,
        attempts=attempts,
        last_error=failure.reason,
        not_before=failure.now + timedelta(seconds=backoff_s(attempt=attempts)),
    )


def _dead_at_once(failure: Failure) -> State:
    failure_class = ErrorClass.POLICY if isinstance(failure.exc, PolicyViolation) else ErrorClass.PERMANENT
    return _dead(failure, failure_class=failure_class, reason=failure.reason)


def _retry_later(failure: Failure) -> State:
    """Transient (or unclassified): attempts + 1, back to the queue after a backoff, until the
    attempt cap; the try that reaches it is a dead letter."""
    attempts = failure.outreach.attempts + 1
    if attempts_exhausted(attempts):
        reason = f"{failure.reason} (attempt {attempts} of {settings.RETRY_MAX_ATTEMPTS}: giving up)"
        return _dead(failure, failure_class=ErrorClass.EXHAUSTED, reason=reason)
    delay = backoff_s(attempt=attempts)
    # The server refused or was never reached: this try certainly did not send, so it does not
    # count towards the resend-once rule (send_attempts counts tries that may have arrived).
    # (Greatest: a row put in SENDING by hand, never claimed, has nothing to give back.)
    uncounted: dict[str, Any] = (
        {"send_attempts": Greatest(F("send_attempts") - 1, 0)} if failure.from_ == State.SENDING else {}
    )
    transition(
        outreach_id=failure.outreach.pk,
        from_=failure.from_,
        to=failure.retry_to,
        note=f"{failure.reason}; retry in {delay:.0f}s",
        error_class=ErrorClass.TRANSIENT,
        attempts=attempts,
        last_error=failure.reason,
        not_before=failure.now + timedelta(seconds=delay),
        reservation_id="",
        **uncounted,
    )
    if not isinstance(failure.exc, TransientError):
        log.error(
            "unclassified failure treated as transient",
            exc_info=failure.exc,
            extra=outreach_log_context(failure.outreach),
        )
    return failure.retry_to


Rule = tuple[
    type[BaseException] | tuple[type[BaseException], ...],
    Callable[[Failure], bool] | None,
    Callable[[Failure], State],
]

# (error class, condition or None, handler): the first row that matches decides.
RULES: tuple[Rule, ...] = (
    (RateLimited, lambda f: f.outreach.rate_limited >= settings.RETRY_MAX_RATE_LIMITED, _refused_too_often),
    ((RateLimited, Paced), None, _wait_for_window),
    (ConfigurationFault, None, _hold_for_deployment),
    (PossiblySent, lambda f: f.from_ == State.SENDING, _resend_once),
    (PermanentError, None, _dead_at_once),
)
