"""`BudgetCore`: keys, per-scope parameters, the Redis round trip and its circuit breaker.

The budget is the only code that knows these keys. Every one sits under the `{prefix}` hash tag,
so all the keys one script touches share a Redis Cluster slot.
  {P}:res                 hash  reservation id -> "<requests>:<tokens>"
  {P}:res:exp             zset  reservation id -> expiry (ms, Redis clock)
  {P}:bucket:<scope>      hash  r, t (levels, units of 1/60000), ts (ms of the last refill)
  {P}:rate:<scope>        hash  AIMD state: base_r/t, cut_r/t, md_ms, blocked (Retry-After end),
                                last_429, report (last provider headers, JSON), report_ms; the
                                other clients' use foreign_r/t (milli-units) and foreign_ms_r/t,
                                the safety gap safe_r/t and safe_ms_r/t, hdr_ms (last report
                                with remaining counts); spread (ms, the measured quantile)
  {P}:spread:<scope>      list  the last spread samples (ms), newest first
  {P}:calls:<scope>       zset  call-time log: "<seq>:<cumulative tokens>" -> ms
  {P}:callmeta:<scope>    hash  seq, cum (tokens ever logged), base (cum of the last pruned call)
  {P}:job_tokens          string the costliest job (tokens) the buckets must hold (`hold_job`):
                                every process sizes its bursts for it, so they agree on the
                                capacities; expires an hour after the last such job was held
Redis errors never leave the budget: they feed the breaker and the failure policy answers.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import redis
from redis.commands.core import Script

from config.redis_client import Client
from orchestrator.budget import lua
from orchestrator.budget.breaker import CircuitBreaker
from orchestrator.budget.values import PROVIDER, SCOPE_RE, Adaptive, FailurePolicy, Limits, Spread

logger = logging.getLogger("orchestrator.budget")

KINDS: Final = {1: "requests", 2: "tokens", 3: "retry_after"}
SCRIPTS: Final = (
    "RESERVE",
    "SETTLE",
    "HEADROOM",
    "ACQUIRE_CALL",
    "REPORT",
    "REPORT_429",
    "SNAPSHOT",
    "SEND_RESERVE",
    "SEND_RELEASE",
    "MAILBOX_RESERVE",
    "MAILBOX_RELEASE",
)


@dataclass(frozen=True, slots=True)
class Plan:
    """What the bucket scripts need for one tuple of scopes, encoded once (the hot path)."""

    keys: list[bytes]  # res, exp, then bucket and rate per scope
    args: list[bytes]  # 9 per scope, see bucket.lua
    capacity: tuple[int, int]  # the smallest bucket of the scopes (units): requests, tokens


# The costliest job's tokens is the most of what was there and the new one; an hour without
# one that large lets the bursts shrink back.
_HOLD_JOB: Final = """
local held = math.max(tonumber(redis.call('GET', KEYS[1]) or '0'), tonumber(ARGV[1]))
redis.call('SET', KEYS[1], held, 'PX', ARGV[2])
return held
"""
JOB_TOKENS_TTL_MS: Final = 3_600_000
JOB_TOKENS_REFRESH_S: Final = 5.0  # how stale another process's bursts may be


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """One budget script call, ready to send: its name (SCRIPTS), KEYS and ARGV."""

    name: str
    keys: Sequence[str | bytes]
    args: Sequence[Any]


class BudgetUnavailable(Exception):
    """Redis could not be used, or the circuit is open: the failure policy decides."""


class BudgetCore:
    """State and plumbing shared by the reservation and pacing halves of `Budget`.

    `clock` overrides Redis TIME (ms) for tests; production leaves it None so every worker
    shares one clock. Give it a client that fails fast (`connect`).
    """

    def __init__(
        self,
        *,
        redis_client: Client,
        limits: Limits,
        scope_limits: Mapping[str, Limits] | None = None,
        prefix: str = "llmbudget",
        reservation_ttl_ms: int = 900_000,
        failure_policy: FailurePolicy = "open",
        adaptive: Adaptive | None = None,
        spread: Spread | None = None,
        breaker: CircuitBreaker | None = None,
        clock: Callable[[], int] | None = None,
    ):
        if failure_policy not in ("open", "closed"):
            raise ValueError(f"failure_policy must be 'open' or 'closed', not {failure_policy!r}")
        if "{" in prefix or "}" in prefix:
            # the prefix is the keys' hash tag: a brace in it would split them across cluster slots
            raise ValueError(f"budget prefix {prefix!r} must not contain braces")
        # The configured limits; `limits` and `scope_limits` are these with bursts that hold
        # the costliest job in flight (`hold_job`).
        self.base_limits = self.limits = limits
        self.base_scope_limits = self.scope_limits = dict(scope_limits or {})
        self.cycle_ms = 2_000  # the dispatch interval the bursts hold a cycle of (settings)
        self.job_tokens = 0
        self._job_tokens_read = -math.inf
        self.prefix = prefix
        self.reservation_ttl_ms = reservation_ttl_ms
        self.failure_policy: FailurePolicy = failure_policy
        self.adaptive = adaptive or Adaptive()
        self.spread = spread or Spread()
        self.breaker = breaker or CircuitBreaker()
        self._clock = clock
        self._redis = redis_client
        self._scripts = {name: redis_client.register_script(getattr(lua, name)) for name in SCRIPTS}
        self._composites: dict[str, Script] = {}  # a script after reports (`run(also=...)`)
        self._plans: dict[tuple[str, ...], Plan] = {}

    def key(self, *parts: str) -> str:
        return f"{{{self.prefix}}}:" + ":".join(parts)

    def set_scope_limits(self, scope_limits: Mapping[str, Limits]) -> None:
        """Replace the non-provider scopes' limits (e.g. organizations' caps read from the
        database); the cached script arguments are rebuilt only when something changed."""
        new = dict(scope_limits)
        if new != self.base_scope_limits:
            self.base_scope_limits = new
            self._limits_hold(self.job_tokens)

    def hold_job(self, *, tokens: int) -> None:
        """Make every bucket able to hold a job of `tokens` at once on top of a dispatch cycle's
        refill (`Limits.holding`): here now, in every other process within
        JOB_TOKENS_REFRESH_S (`job_tokens_refresh`). The dispatcher calls it each cycle with its
        costliest pick's expected tokens. A Redis error leaves this process's bursts as they are."""
        try:
            held = int(self._redis.eval(_HOLD_JOB, 1, self.key("job_tokens"), tokens, JOB_TOKENS_TTL_MS))
        except redis.RedisError as exc:
            logger.warning("budget: costliest job not recorded (%s)", exc)
            return
        self._job_tokens_read = time.monotonic()
        self._limits_hold(held)

    def job_tokens_refresh(self) -> None:
        """Size the bursts for the costliest job any dispatcher asked them to hold (`hold_job`),
        read at most every JOB_TOKENS_REFRESH_S: the workers, before settling, so their
        refills and refunds clip the buckets at the capacities the dispatcher reserves in."""
        if time.monotonic() - self._job_tokens_read < JOB_TOKENS_REFRESH_S:
            return
        try:
            raw = self._redis.get(self.key("job_tokens"))
        except redis.RedisError:
            return
        self._job_tokens_read = time.monotonic()
        self._limits_hold(int(raw or 0))

    def _limits_hold(self, tokens: int) -> None:
        self.job_tokens = tokens
        hold = {"tokens": tokens, "interval_ms": self.cycle_ms}
        limits = self.base_limits.holding(**hold)
        scope_limits = {scope: lim.holding(**hold) for scope, lim in self.base_scope_limits.items()}
        if (limits, scope_limits) != (self.limits, self.scope_limits):
            self.limits, self.scope_limits = limits, scope_limits
            # A new cache, not cleared: a worker thread building a plan from the old limits
            # stores it in the old dict (see `plan`), never in the one the new limits fill.
            self._plans = {}

    def limits_for(self, scope: str) -> Limits:
        """Limits of a scope: "provider", an exact entry, or a family entry such as "org:*"."""
        if not SCOPE_RE.match(scope):
            raise ValueError(f"bad scope name {scope!r}")
        if scope == PROVIDER:
            return self.limits
        found = self.scope_limits.get(scope) or self.scope_limits.get(scope.split(":", 1)[0] + ":*")
        if found is None:
            raise ValueError(f"no limits configured for scope {scope!r}")
        return found

    def bucket_args(self, scope: str) -> list[int]:
        """The 9 per-scope ARGV of the bucket scripts (see bucket.lua)."""
        limits = self.limits_for(scope)
        step = self.adaptive.step
        return [
            *limits.capacities(),
            limits.rpm,
            limits.tpm,
            step(limits.rpm),
            step(limits.tpm),
            limits.strict_denominator(),
            limits.margin_floor_ms,
            limits.margin_ms,
        ]

    def plan(self, scopes: tuple[str, ...]) -> Plan:
        """KEYS and per-scope ARGV of the bucket scripts for these scopes, cached."""
        plans = self._plans
        plan = plans.get(scopes)
        if plan is None:
            if not scopes or len(set(scopes)) != len(scopes):
                raise ValueError(f"scopes must be distinct and non-empty: {scopes!r}")
            keys = [self.key("res"), self.key("res", "exp")]
            args: list[int] = []
            for scope in scopes:
                keys += [self.key("bucket", scope), self.key("rate", scope)]
                args += self.bucket_args(scope)
            caps = [self.limits_for(scope).capacities() for scope in scopes]
            plan = plans[scopes] = Plan(
                keys=[k.encode() for k in keys],
                args=[b"%d" % a for a in args],
                capacity=(min(r for r, _ in caps), min(t for _, t in caps)),
            )
        return plan

    def now_arg(self) -> bytes | int:
        return b"" if self._clock is None else self._clock()

    def run(
        self, name: str, keys: Sequence[str | bytes], args: Sequence[Any], *, also: Sequence[ScriptCall] = ()
    ) -> Any:
        """One script call behind the breaker; any Redis error becomes BudgetUnavailable.

        `also`: provider reports (`Pacing.report_call`) run first in the same script call
        (`lua.after_reports`: one round trip, one Redis Cluster slot), a failed one ignored."""
        if any(call.name != "REPORT" for call in also):
            raise ValueError(f"only reports ride with another call, not {[c.name for c in also]}")
        if not self.breaker.allow():
            raise BudgetUnavailable("circuit open")
        try:
            if also:
                result = self._after_reports(name)(
                    keys=[*(k for call in also for k in call.keys), *keys],
                    args=[
                        len(also),
                        *(n for call in also for n in (len(call.keys), len(call.args))),
                        *(a for call in also for a in call.args),
                        *args,
                    ],
                )
            else:
                result = self._scripts[name](keys=keys, args=args)
        except redis.RedisError as exc:
            self.breaker.failure()
            logger.warning("budget: Redis failed in %s (%s); circuit %s", name, exc, self.breaker.state)
            raise BudgetUnavailable(str(exc)) from exc
        self.breaker.success()
        return result

    def also_run(self, calls: Sequence[ScriptCall]) -> None:
        """Reports that found no budget call to ride with (a job without a reservation): one
        round trip for all of them, failures ignored."""
        if calls:
            with contextlib.suppress(BudgetUnavailable):
                self.run(calls[-1].name, calls[-1].keys, calls[-1].args, also=calls[:-1])

    def _after_reports(self, name: str) -> Script:
        if name not in self._composites:
            self._composites[name] = self._redis.register_script(lua.after_reports(name))
        return self._composites[name]

    def unavailable_wait_ms(self) -> int:
        return max(self.breaker.retry_in_ms(), 1_000)

    def reset(self) -> int:
        """Delete every key of this budget (tests, or an operator starting over)."""
        keys = list(self._redis.scan_iter(match=f"{{{self.prefix}}}:*", count=1000))
        return int(self._redis.delete(*keys)) if keys else 0
