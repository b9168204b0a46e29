"""The email send budget: the mail provider's limits, in the same Redis buckets as the LLM's.

Two kinds of limit, taken together in one atomic script per message (send_reserve.lua):
- the account's rate: messages per second and/or per minute (EMAIL_RATE_PER_SECOND,
  EMAIL_RATE_PER_MINUTE), each a strict one-message token bucket (maths.send_bucket) in scope
  `email:second` / `email:minute`: never more than the limit in any window, sends evenly spaced;
- each sender domain's day: at most EMAIL_DOMAIN_DAILY_LIMIT messages per UTC day, and during
  its warm-up (EMAIL_WARMUP, "50,100,200": the caps of the domain's first send days) at most
  that day's step. The domain's first send day is remembered in Redis.

The send worker reserves one message right before SMTP (`reserve_send`) and releases it after
(`release_send`): kept when the message left (or may have: no answer after DATA), given back
when it never did (the claim was lost, the lead opted out, the server refused it). Each
reservation is released at most once (the script removes its record atomically); one never
released expires with the LLM reservations' TTL and stays counted: the safe side. Without any
EMAIL_* limit configured `reserve_send` grants at once without touching Redis: today's behaviour.

Keys, beside the LLM's under the same hash tag (core.py):
  {P}:send:res            hash  send reservation id -> the day-count key it counts in (checked)
  {P}:send:res:exp        zset  send reservation id -> expiry (ms)
  {P}:send:day:<h>:<n>    str   messages of the sender domain hashed h on UTC day n (since 1970)
  {P}:send:first          hash  sender domain -> its first send day (the warm-up's day 1)
  {P}:bucket:email:*      hash  the account buckets (bucket.lua), as every scope's
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from typing import Final

import redis

from orchestrator.budget import maths
from orchestrator.budget.core import BudgetCore, BudgetUnavailable

DAY_MS: Final = 86_400_000
SECOND_SCOPE: Final = "email:second"
MINUTE_SCOPE: Final = "email:minute"
SEND_UNMETERED: Final = "send-unmetered"


@dataclass(frozen=True, slots=True)
class SendRules:
    """The mail provider's limits (None: no such limit). All None: no send budget at all."""

    per_second: int | None = None
    per_minute: int | None = None
    domain_daily: int | None = None
    warmup: tuple[int, ...] = ()
    margin_ms: int = 0  # the rate's window widened by the spread of send delays (maths.send_bucket)

    def __post_init__(self) -> None:
        for limit, window_ms in ((self.per_second, 1_000), (self.per_minute, maths.WINDOW_MS)):
            if limit is not None:
                maths.send_bucket(limit=limit, window_ms=window_ms)  # raises for one it cannot keep
        if self.margin_ms < 0:
            raise ValueError(f"margin_ms must not be negative: {self}")
        if (self.domain_daily is not None and self.domain_daily < 1) or any(s < 1 for s in self.warmup):
            raise ValueError(f"daily caps must be positive: {self}")

    @property
    def enabled(self) -> bool:
        return any((self.per_second, self.per_minute, self.domain_daily, self.warmup))

    @property
    def rate_per_s(self) -> float | None:
        """The account's sustained strict rate (messages per second), or None when unlimited."""
        rates = [rate * 1_000 / maths.UNITS for _, (rate, _) in self.buckets().values()]
        return min(rates) if rates else None

    @property
    def rate_label(self) -> str:
        """The account's binding rate as configured ("20/s", "600/min"); "" when unlimited."""
        found = self.buckets()
        if not found:
            return ""
        return min(found.values(), key=lambda bucket: bucket[1][0])[0]

    def buckets(self) -> dict[str, tuple[str, tuple[int, int]]]:
        """scope -> (its limit as people say it, (refill units/ms, burst ms))."""
        found: dict[str, tuple[str, tuple[int, int]]] = {}
        if self.per_second:
            found[SECOND_SCOPE] = (
                f"{self.per_second}/s",
                maths.send_bucket(limit=self.per_second, window_ms=1_000, margin_ms=self.margin_ms),
            )
        if self.per_minute:
            found[MINUTE_SCOPE] = (
                f"{self.per_minute}/min",
                maths.send_bucket(limit=self.per_minute, window_ms=maths.WINDOW_MS, margin_ms=self.margin_ms),
            )
        return found


@dataclass(frozen=True, slots=True)
class DomainDay:
    """A sender domain's UTC day as `reserve_send` would judge it now: messages counted, the
    cap of the day (the warm-up step's when lower; None: no cap) and the warm-up day (1-based;
    0: past the ramp). The dispatcher's admission reads it before any LLM work."""

    sent: int
    cap: int | None
    warmup_day: int

    @property
    def room(self) -> int | None:
        return None if self.cap is None else self.cap - self.sent


def domain_day_cap(*, rules: SendRules, step: int) -> tuple[int | None, int]:
    """(cap, warm-up day) on the domain's `step`-th send day, as send_reserve.lua computes it."""
    cap = rules.domain_daily
    if step <= len(rules.warmup):
        ramp = rules.warmup[step - 1]
        return (ramp if cap is None or ramp < cap else cap), step
    return cap, 0


@dataclass(frozen=True, slots=True)
class SendGrant:
    """One message may leave now. Keep `id` with the row; release it after SMTP."""

    id: str
    unmetered: bool = False


@dataclass(frozen=True, slots=True)
class SendDenied:
    """Not now: ask again after `wait_ms`. `reason` is what the row shows while it waits."""

    wait_ms: int
    reason: str


def day_cap_reason(*, domain: str, cap: int, warmup_day: int) -> str:
    """'sender domain example.com: 200/day reached (warm-up day 3), resumes 00:00 UTC'."""
    ramp = f" (warm-up day {warmup_day})" if warmup_day else ""
    return f"sender domain {domain}: {cap}/day reached{ramp}, resumes 00:00 UTC"


def _domain_key(domain: str) -> str:
    """A sender domain as a short key part: a hash, since domains run to 253 characters."""
    return hashlib.sha256(domain.encode()).hexdigest()[:12]


def until_next_day_ms(*, now_ms: int) -> int:
    """Milliseconds until the next UTC midnight (at least 1)."""
    return DAY_MS - now_ms % DAY_MS


class Sends(BudgetCore):
    send_rules: SendRules = SendRules()  # budget_from_settings sets the configured ones

    def reserve_send(self, *, domain: str) -> SendGrant | SendDenied:
        """Reserve one message of sender `domain` in the account's rate and the domain's day.

        Never raises on Redis failure: the failure policy answers (open: unmetered; closed:
        wait). No limits configured: a grant at once, without Redis."""
        rules = self.send_rules
        if not rules.enabled:
            return SendGrant(id="")
        domain = domain.lower() or "localhost"
        now_ms = self._clock() if self._clock is not None else int(time.time() * 1000)
        day, domain_key = now_ms // DAY_MS, _domain_key(domain)
        # The id names its day count, so a release finds it (ids fit Outreach.reservation_id).
        rid = f"send.{os.urandom(6).hex()}.{day}.{domain_key}"
        keys = [
            *self._send_record_keys(),
            self.key("send", "day", domain_key, str(day)),
            self.key("send", "first"),
        ]
        args: list[object] = [
            self.now_arg(),
            self.reservation_ttl_ms,
            rid,
            self.adaptive.interval_ms,
            domain,
            day,
            -1 if rules.domain_daily is None else rules.domain_daily,
            ",".join(map(str, rules.warmup)),
        ]
        keys, args = self._with_account_buckets(keys, args)
        try:
            granted, wait, scope_index, _, _, cap, warmup_day = self.run("SEND_RESERVE", keys, args)
        except BudgetUnavailable:
            if self.failure_policy == "closed":
                return SendDenied(
                    self.unavailable_wait_ms(), "send budget unavailable (Redis down, closed policy)"
                )
            return SendGrant(id=SEND_UNMETERED, unmetered=True)
        if granted:
            return SendGrant(id=rid)
        if scope_index == 0:
            return SendDenied(
                until_next_day_ms(now_ms=now_ms),
                day_cap_reason(domain=domain, cap=cap, warmup_day=warmup_day),
            )
        said, _ = list(rules.buckets().values())[scope_index - 1]  # the scope that said no
        return SendDenied(wait, f"send rate {said} reached")

    def domain_days(self, *, domains: list[str], now_ms: int) -> dict[str, DomainDay]:
        """Each sender domain's day so far (no reservation made): one read of the count keys and
        one of the first days. Empty without a domain day or warm-up configured; on a Redis
        failure too (the send worker's own check still holds)."""
        rules = self.send_rules
        if not domains or (rules.domain_daily is None and not rules.warmup):
            return {}
        day = now_ms // DAY_MS
        names = [d.lower() or "localhost" for d in domains]
        try:
            counts = self._redis.mget([self.key("send", "day", _domain_key(d), str(day)) for d in names])
            firsts = self._redis.hmget(self.key("send", "first"), names)
        except redis.RedisError:
            return {}
        found: dict[str, DomainDay] = {}
        for domain, count, first in zip(domains, counts, firsts, strict=True):
            cap, warmup_day = domain_day_cap(rules=rules, step=day - int(first or day) + 1)
            found[domain] = DomainDay(sent=int(count or 0), cap=cap, warmup_day=warmup_day)
        return found

    def release_send(self, *, reservation_id: str, sent: bool) -> bool:
        """After SMTP: `sent` keeps the message counted; not sent gives it back to the account
        buckets and the domain's day. At most once; False when there is nothing to release
        (no budget, unmetered, already released, expired)."""
        parts = reservation_id.split(".")
        if len(parts) != 4 or parts[0] != "send" or not self.send_rules.enabled:
            return False
        _, _, day, domain_key = parts
        keys = [*self._send_record_keys(), self.key("send", "day", domain_key, day)]
        args: list[object] = [self.now_arg(), reservation_id, "0" if sent else "1", self.adaptive.interval_ms]
        keys, args = self._with_account_buckets(keys, args)
        try:
            return bool(self.run("SEND_RELEASE", keys, args) == 1)
        except BudgetUnavailable:
            return False

    def _send_record_keys(self) -> list[str]:
        return [self.key("send", "res"), self.key("send", "res", "exp")]

    def _with_account_buckets(self, keys: list[str], args: list[object]) -> tuple[list[str], list[object]]:
        """Append each account scope's (bucket, rate) keys and its 9 bucket.lua ARGV: a strict
        bucket whose limit is its own refill rate (denominator = the window: no adaptation)."""
        for scope, (_, (rate, burst_ms)) in self.send_rules.buckets().items():
            keys += [self.key("bucket", scope), self.key("rate", scope)]
            capacity = rate * burst_ms
            args += [capacity, capacity, rate, rate, 1, 1, maths.WINDOW_MS, 0, 0]
        return keys, args
