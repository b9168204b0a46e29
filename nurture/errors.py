"""One error taxonomy for the pipeline: what a failure means for the job, decided once.

The LLM client (nurture.writing.llm) and the mail module (nurture.mail.transport) translate provider and SMTP
errors into these classes at the boundary; everything above them (tasks, dead letters) only
ever asks "which class is this?", never looks at status codes or SDK exceptions again.

`error_class` values are those of `outreach.models.ErrorClass` (kept as plain strings so this
module imports nothing from Django and can be used by benchmarks and stubs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class RateLimitInfo:
    """The provider's x-ratelimit-* headers, parsed. None = the header was absent or unreadable.

    Other systems may share our provider key, so these (not our own counters) say how much of
    the window is really left; the budget adapts its rate from them.
    """

    limit_requests: int | None = None
    limit_tokens: int | None = None
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None
    raw: Mapping[str, str] = field(default_factory=dict)

    @property
    def present(self) -> bool:
        return bool(self.raw)


class PipelineError(Exception):
    """Base: a failure already classified. Subclasses say what the job should do next."""

    error_class: ClassVar[str] = "transient"
    suggested_action: ClassVar[str] = "retry"

    def __init__(
        self, message: str, *, status: int | None = None, rate_limits: RateLimitInfo | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status  # HTTP or SMTP reply code when there was one
        self.rate_limits = rate_limits or RateLimitInfo()


class TransientError(PipelineError):
    """May pass on a later try (5xx, timeouts, refused connections, SMTP 4xx): retry with backoff."""

    error_class = "transient"
    suggested_action = "replay once the provider or mail server is healthy"


class PermanentError(PipelineError):
    """The same request will fail the same way (bad key, bad request, SMTP 5xx): never retry."""

    error_class = "permanent"
    suggested_action = "fix the configuration or the data, then replay"


class RateLimited(PipelineError):
    """The provider said 429: re-queue with not_before = now + retry_after_s.

    Deliberately not a TransientError: a 429 is not a failed attempt (no attempts+1, no backoff
    growth), it is the provider telling us when capacity returns; a handler that caught
    TransientError first would wrongly count it.
    """

    error_class = "rate_limited"
    suggested_action = "re-queue after retry_after_s"

    def __init__(
        self,
        message: str,
        *,
        retry_after_s: float,
        status: int | None = 429,
        rate_limits: RateLimitInfo | None = None,
    ) -> None:
        super().__init__(message, status=status, rate_limits=rate_limits)
        self.retry_after_s = retry_after_s


class ConfigurationFault(PermanentError):
    """The provider refused the deployment itself: 401 (key), 403 (permission), 404 (model not
    found), or 400 for a parameter its model does not take (`param`: max_tokens sent to a
    reasoning model, the dialect in LLM_DEPLOYMENTS is wrong). Every call to it would fail alike, so it is not the job's fault: the job goes back
    to the queue uncharged and the deployment's breaker (orchestrator.deployments.breaker) stops
    work going there until a probe call succeeds. A PermanentError for any handler that does
    not know this class."""

    error_class = ""  # not a failure of the job: no dead letter, no attempt
    suggested_action = "fix LLM_DEPLOYMENTS (model name, key, base_url, dialect); work resumes after a probe"

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        code: str | None,
        param: str | None = None,
        rate_limits: RateLimitInfo | None = None,
    ) -> None:
        super().__init__(message, status=status, rate_limits=rate_limits)
        self.code = code
        self.param = param


class PolicyViolation(PermanentError):
    """A generated draft failed nurture.writing.draft_policy.check_draft (after its one regeneration)."""

    error_class = "policy"
    suggested_action = "edit the draft by hand or replay to regenerate"

    def __init__(self, message: str, *, violations: Sequence[str]) -> None:
        super().__init__(message)
        self.violations = list(violations)


class RecipientRefused(PermanentError):
    """The recipient's mail server refused the address for good (5xx at RCPT, or a 5.1.x
    "no such user" at DATA), or an email provider refused the recipient (anymail's
    AnymailRecipientsRefused, e.g. Postmark's inactive address): a hard bounce. The lead is marked undeliverable and its work
    cancelled (nurture.mail.events), not dead-lettered: there is nothing to replay."""

    suggested_action = "none: the address does not accept mail"


class OptedOut(PermanentError):
    """The lead opted out: nothing may be sent. Callers should cancel the outreach.

    A PermanentError so that any handler that does not know this class still never retries it.
    """

    suggested_action = "cancel: the lead opted out"


class PossiblySent(PipelineError):
    """The mail server may have accepted the email: the connection died or timed out after the
    DATA command, before its answer; or an email provider's API answered 5xx, or the connection
    was lost after the request went out (nurture.mail.transport.classify_esp_error). Neither a success nor a plain transient failure: resending
    may email the prospect twice, so it is resent at most once and then left to a person
    (orchestrator.failures.recovery.send_unconfirmed)."""

    error_class = "possibly_sent"
    suggested_action = "confirm whether the prospect got it before replaying"


class Paced(PipelineError):
    """Our call-time pacer says the provider window is full for longer than a worker should wait."""

    error_class = ""

    def __init__(self, *, wait_s: float, cause: str = "provider window full") -> None:
        super().__init__(f"{cause} for {wait_s:.1f}s: re-queued")
        self.wait_s = wait_s
