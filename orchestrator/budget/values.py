"""The budget's value types: configuration in, decisions out. No I/O here."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Final, Literal

from orchestrator.budget import maths

FailurePolicy = Literal["open", "closed"]
SCOPE_RE: Final = re.compile(r"^[A-Za-z0-9_.:\-]{1,64}$")  # no '@' or ',': they delimit reservation ids
PROVIDER: Final = "provider"


def organization_scope(organization_id: int) -> str:
    """The scope of one organization's own cap (Organization.llm_rpm / llm_tpm)."""
    return f"org:{organization_id}"


@dataclass(frozen=True, slots=True)
class Limits:
    """One scope's limits, as the provider counts them: per sliding 60 s window.

    `burst_ms` is the bucket's capacity in milliseconds of refill: at least one dispatch cycle
    plus one reservation (`maths.burst_for_cycle`). `strict=True` lowers the refill rate so
    that rate * 60 s + burst <= limit: the bucket alone never admits more than the provider's
    window holds. `strict=False` ("paced") refills at what the call pacer passes and relies on
    `Budget.acquire_call` before every provider call. `margin_ms` widens the pacer's window
    past the provider's 60 s: it must cover the spread of the delay between logging a call and
    its arrival at the provider. The pacer measures that spread (`Spread`) and uses it plus
    `margin_floor_ms`, never more than `margin_ms`; until it has measured, `margin_ms`. See
    maths.py and docs/budget.md.
    """

    rpm: int
    tpm: int
    burst_ms: int = 2_000
    strict: bool = False  # paced, as LLM_BUDGET_STRICT defaults (a test holds them equal)
    margin_ms: int = 1_000  # the most margin, and the margin before any measurement
    margin_floor_ms: int = 100  # added to the measured spread: what the measurement cannot see
    # Paced: the token bucket's capacity in ms of refill when more than `burst_ms` (`holding`:
    # PACED_TOKEN_CYCLES cycles of refill plus the costliest job).
    token_burst_ms: int = 0

    def __post_init__(self) -> None:
        if min(self.rpm, self.tpm, self.burst_ms) < 1 or min(self.margin_ms, self.margin_floor_ms) < 0:
            raise ValueError(f"limits must be positive: {self}")

    @property
    def fastest_margin_ms(self) -> int:
        """The smallest margin a measured spread can bring: the fastest paced refill."""
        return min(self.margin_ms, self.margin_floor_ms)

    def rates(self) -> tuple[int, int]:
        """Refill rates (units per ms) at the configured limits, before any spread is measured."""
        return self._rates(margin_ms=self.margin_ms)

    def capacities(self) -> tuple[int, int]:
        """Bucket capacities in units (requests, tokens): burst_ms of the fastest refill a
        measured margin can bring, so the bucket still holds a dispatch cycle's refill then."""
        rate_r, rate_t = self._rates(margin_ms=self.fastest_margin_ms)
        return rate_r * self.burst_ms, rate_t * max(self.burst_ms, self.token_burst_ms)

    def holding(self, *, tokens: int, interval_ms: int) -> Limits:
        """These limits with a burst that also holds a dispatch cycle's refill plus one job of
        `tokens` (`maths.burst_for_cycle`), so a costly job is never left waiting for a bucket
        too small to take it; paced, a token bucket that holds PACED_TOKEN_CYCLES cycles' refill
        plus the job (`token_burst_ms`). Unchanged when the bursts hold it already, or when no
        burst can: strict limits tend to their limit, and a job beyond it is reserved at the
        capacity and charged the rest when settled."""
        amount = min(tokens, self.tpm)
        margin_ms = self.fastest_margin_ms
        try:
            need = maths.burst_for_cycle(
                limit=self.tpm,
                amount=amount,
                interval_ms=interval_ms,
                strict=self.strict,
                margin_ms=margin_ms,
            )
        except ValueError:
            return self
        token_need = 0
        if not self.strict:
            token_need = maths.burst_for_cycle(
                limit=self.tpm,
                amount=amount,
                interval_ms=maths.PACED_TOKEN_CYCLES * interval_ms,
                strict=False,
                margin_ms=margin_ms,
            )
        if need <= self.burst_ms and token_need <= max(self.burst_ms, self.token_burst_ms):
            return self
        burst_ms = max(need, self.burst_ms)
        token_burst_ms = max(token_need, self.token_burst_ms)
        return dataclasses.replace(
            self, burst_ms=burst_ms, token_burst_ms=token_burst_ms if token_burst_ms > burst_ms else 0
        )

    def strict_denominator(self) -> int:
        """The Lua side's refill denominator: rate = limit * 60000 / it. 0 for paced limits,
        whose denominator is 60000 + the margin in force (measured, in Redis)."""
        return maths.WINDOW_MS + self.burst_ms if self.strict else 0

    def _rates(self, *, margin_ms: int) -> tuple[int, int]:
        return (
            maths.bucket_rate(
                limit=self.rpm, burst_ms=self.burst_ms, strict=self.strict, margin_ms=margin_ms
            ),
            maths.bucket_rate(
                limit=self.tpm, burst_ms=self.burst_ms, strict=self.strict, margin_ms=margin_ms
            ),
        )


@dataclass(frozen=True, slots=True)
class Adaptive:
    """AIMD on the provider-window limits (both requests and tokens).

    When the provider's answers say what is left of its window (x-ratelimit-remaining-*), the
    limits follow them: what the window held beyond our own calls is another client's, and our
    limit is the configured one less that (`report_provider`), up or down, at every answer.
    The estimate of the other client's use rises at once, holds its peak for an interval (an
    answer is as old as the model's latency: the client may be back at its peak already), then
    falls by at most `release_fraction` of the limit per interval, and one below
    `tolerance_fraction` is noise (our calls racing the header). A 429
    while answers carry those headers widens a safety gap under that estimate (doubling, once
    per interval; it closes by one tolerance per interval) rather than halving the limits.

    Without such headers: a 429 multiplies the limits by `decrease` (at most once per
    `interval_ms`, so a volley of 429s from calls already in flight counts as one signal) when
    our own calls of the last interval ran at `busy_fraction` of the limits or more; otherwise
    it only holds calls for Retry-After (a provider outage would else cut us down to the floor,
    and the additive climb back would take minutes after the provider recovered). Every
    `interval_ms` without a cut or a report gives back `step_fraction` of the configured limit.
    Limits never fall below `floor_fraction` of the configured ones.
    """

    decrease: float = 0.5
    step_fraction: float = 0.02
    interval_ms: int = 5_000
    floor_fraction: float = 0.05
    tolerance_fraction: float = 0.01  # report noise ignored: requests racing the header
    busy_fraction: float = 0.5  # a 429 cuts only if our last interval ran at this x the limit
    release_fraction: float = 0.02  # the other client's estimate falls at most this x L per interval

    def step(self, limit: int) -> int:
        return max(1, int(limit * self.step_fraction))

    def floor(self, limit: int) -> int:
        return max(1, int(limit * self.floor_fraction))

    def tolerance(self, limit: int) -> int:
        return max(1, int(limit * self.tolerance_fraction))

    def release(self, limit: int) -> int:
        return max(1, int(limit * self.release_fraction))


@dataclass(frozen=True, slots=True)
class Spread:
    """How the pacer measures the spread of the delay from logging a call to its arrival.

    Each provider answer gives one sample: the time from the call's admission to its report
    (Redis clock), less the processing time the provider says it spent (`openai-processing-ms`;
    without it the sample is the whole round trip, an upper bound). The margin is `factor` x
    the `quantile` of the last `samples`, plus the floor, capped; with fewer than `min_samples`
    it stays at the cap. The highest by default, and half as much again: one call later than
    the margin can cost a 429 and a Retry-After pause of every call, a margin a little too wide
    only a fraction of a percent; and the next calls beat the highest of the last ones now and
    then (benches on a loaded machine: highest 177 ms, margin 227 ms, one 429; then at 1.5x and
    a 50 ms floor, one 429 in 1,150 calls). Twice the highest of the last 1,024, plus the floor:
    at 300 ms model latency that is still ~99.2-99.5% of the key.
    """

    samples: int = 1024
    min_samples: int = 20
    quantile: float = 1.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if not (1 <= self.min_samples <= self.samples and 0 < self.quantile <= 1 and self.factor >= 1):
            raise ValueError(f"bad spread settings: {self}")


@dataclass(frozen=True, slots=True)
class Reservation:
    """Budget held for one unit of work until settled, refunded or expired (`expires_at_ms`,
    Redis clock). `unmetered` marks a fail-open grant made while Redis was unreachable."""

    id: str
    requests: int
    tokens: int
    ttl_ms: int
    expires_at_ms: int
    unmetered: bool = False


@dataclass(frozen=True, slots=True)
class Draw:
    """What one job reserves in one set of scopes (`Budget.reserve_jobs`): one reservation.
    A job calling two deployments draws from each, both with its organization's cap."""

    scopes: tuple[str, ...]
    requests: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Denied:
    """No budget now: retry after `wait_ms`. `bucket` names what said no, e.g.
    "provider:requests", "provider:tokens", "provider:retry_after" or "redis"."""

    wait_ms: int
    bucket: str


@dataclass(frozen=True, slots=True)
class Headroom:
    """What the dispatcher may reserve now, across the scopes asked about (the tightest).

    `requests`/`tokens` are available now (fractional); `requests_per_min`/`tokens_per_min` the
    current refill rates; `limit_rpm`/`limit_tpm` the adapted provider-window limits; while
    `blocked_ms` > 0 the provider asked us to wait (Retry-After) and nothing is granted.
    """

    requests: float
    tokens: float
    requests_per_min: int
    tokens_per_min: int
    limit_rpm: int
    limit_tpm: int
    blocked_ms: int = 0
    unmetered: bool = False

    def fits(self, *, requests_each: int, tokens_each: int) -> int:
        """How many reservations of this size would be granted right now."""
        if self.blocked_ms > 0:
            return 0
        by_requests = int(self.requests // requests_each) if requests_each else 1 << 30
        by_tokens = int(self.tokens // tokens_each) if tokens_each else 1 << 30
        return max(0, min(by_requests, by_tokens))


@dataclass(frozen=True, slots=True)
class ProviderReport:
    """What one answer said of the provider's window (its x-ratelimit-* and
    openai-processing-ms headers), for `Budget.report_provider` now, or to ride with the job's
    next budget call (`Budget.report_call`: its `also=`), one round trip fewer per LLM call.
    `answered_s` (time.monotonic) is when the answer came: a report sent later says so, and the
    spread sample and the estimate's clock are taken at the answer, not at the send."""

    remaining_requests: int | None
    remaining_tokens: int | None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None
    sent_at_ms: int | None = None
    processing_ms: int | None = None
    scope: str = PROVIDER
    answered_s: float | None = None


@dataclass(frozen=True, slots=True)
class CallSlot:
    """Answer of `Budget.acquire_call`: call now (`wait_ms == 0`; the call was logged at `at_ms`,
    Redis clock: pass it to `report_provider(sent_at_ms=...)`) or wait `wait_ms` and ask again."""

    wait_ms: int
    at_ms: int = 0
    bucket: str = ""
    unmetered: bool = False
