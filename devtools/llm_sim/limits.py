"""The simulator's admission: a strict sliding window or a token bucket, per requests and tokens."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from devtools.llm_sim.config import Mode


@dataclass(frozen=True)
class Decision:
    admitted: bool
    wait_s: float  # until this request could pass (0 when admitted, inf = never: too large)
    remaining_requests: int
    remaining_tokens: int
    reset_requests_s: float  # until the limit is back to its initial state (OpenAI's meaning)
    reset_tokens_s: float


class SlidingWindow:
    """Admitted (time, tokens) over the last `window_s`: the half-open window (now - W, now].

    Times must not decrease between calls (the caller holds a lock around now + call).
    """

    def __init__(self, *, window_s: float) -> None:
        self.window_s = window_s
        self._log: deque[tuple[float, int]] = deque()
        self._tokens = 0

    def counts(self, now: float) -> tuple[int, int]:
        self._prune(now)
        return len(self._log), self._tokens

    def add(self, now: float, tokens: int) -> tuple[int, int]:
        self._prune(now)
        self._log.append((now, tokens))
        self._tokens += tokens
        return len(self._log), self._tokens

    def wait_s(self, now: float, *, tokens: int, rpm: int, tpm: int) -> float:
        """Exact seconds until one request of `tokens` fits, if nothing else arrives."""
        if tokens > tpm:
            return math.inf
        count, used = self.counts(now)
        wait = 0.0
        if count + 1 > rpm:  # the (count + 1 - rpm)-th oldest entry must age out first
            wait = self._log[count - rpm][0] + self.window_s - now
        excess, freed = used + tokens - tpm, 0
        for at, size in self._log if excess > 0 else ():
            freed += size
            if freed >= excess:
                wait = max(wait, at + self.window_s - now)
                break
        return max(wait, 0.0)

    def reset_s(self, now: float) -> float:
        self._prune(now)
        return max(self._log[-1][0] + self.window_s - now, 0.0) if self._log else 0.0

    def clear(self) -> None:
        self._log.clear()
        self._tokens = 0

    def _prune(self, now: float) -> None:
        # "t + W <= now", not "t <= now - W": the same float sum as wait_s(), so an entry is out
        # exactly when a waiter was told it would be.
        while self._log and self._log[0][0] + self.window_s <= now:
            self._tokens -= self._log.popleft()[1]


class TokenBucket:
    """Capacity `capacity`, refilled continuously at capacity per `window_s`."""

    def __init__(self, *, capacity: int, window_s: float) -> None:
        self.capacity = float(capacity)
        self.rate = capacity / window_s
        self._level, self._at = float(capacity), 0.0

    def wait_s(self, now: float, amount: int) -> float:
        if amount > self.capacity:
            return math.inf
        # 1e-9: refill arithmetic may leave a hair short at exactly the time we told a waiter
        return max(amount - self._refill(now) - 1e-9, 0.0) / self.rate

    def take(self, now: float, amount: int) -> None:
        self._level = self._refill(now) - amount

    def remaining(self, now: float) -> int:
        return int(self._refill(now))

    def reset_s(self, now: float) -> float:
        return (self.capacity - self._refill(now)) / self.rate

    def _refill(self, now: float) -> float:
        if now > self._at:
            self._level, self._at = min(self.capacity, self._level + (now - self._at) * self.rate), now
        return self._level


class Limiter:
    """The provider's admission rule. The sliding window is always kept: in window mode it
    decides, in bucket mode it only observes, so /stats shows the real peak either way."""

    def __init__(self, *, rpm: int, tpm: int, window_s: float, mode: Mode) -> None:
        self.rpm, self.tpm, self.mode = rpm, tpm, mode
        self.window = SlidingWindow(window_s=window_s)
        self._buckets = (
            TokenBucket(capacity=rpm, window_s=window_s),
            TokenBucket(capacity=tpm, window_s=window_s),
        )
        self.peak_requests = self.peak_tokens = 0

    def admit(self, now: float, tokens: int, *, force_refuse: bool = False) -> Decision:
        wait = 1.0 if force_refuse else self._wait_s(now, tokens)
        if wait == 0:
            count, used = self.window.add(now, tokens)
            self.peak_requests, self.peak_tokens = max(self.peak_requests, count), max(self.peak_tokens, used)
            self._buckets[0].take(now, 1)
            self._buckets[1].take(now, tokens)
        return self._decision(now, admitted=wait == 0, wait_s=wait)

    def reset_peaks(self) -> None:
        self.peak_requests = self.peak_tokens = 0

    def clear(self) -> None:
        self.window.clear()
        self._buckets = (
            TokenBucket(capacity=self.rpm, window_s=self.window.window_s),
            TokenBucket(capacity=self.tpm, window_s=self.window.window_s),
        )

    def _wait_s(self, now: float, tokens: int) -> float:
        if self.mode == "window":
            return self.window.wait_s(now, tokens=tokens, rpm=self.rpm, tpm=self.tpm)
        return max(self._buckets[0].wait_s(now, 1), self._buckets[1].wait_s(now, tokens))

    def _decision(self, now: float, *, admitted: bool, wait_s: float) -> Decision:
        if self.mode == "bucket":
            requests, tokens = self._buckets
            return Decision(
                admitted,
                wait_s,
                requests.remaining(now),
                tokens.remaining(now),
                requests.reset_s(now),
                tokens.reset_s(now),
            )
        count, used = self.window.counts(now)
        reset = self.window.reset_s(now)
        return Decision(admitted, wait_s, max(self.rpm - count, 0), max(self.tpm - used, 0), reset, reset)


def format_duration(seconds: float) -> str:
    """OpenAI's reset style: '120ms', '1.5s', '1m0.25s'."""
    ms = max(math.ceil(seconds * 1000), 0)
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest = divmod(ms, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def limit_headers(*, rpm: int, tpm: int, decision: Decision) -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": str(rpm),
        "x-ratelimit-limit-tokens": str(tpm),
        "x-ratelimit-remaining-requests": str(decision.remaining_requests),
        "x-ratelimit-remaining-tokens": str(decision.remaining_tokens),
        "x-ratelimit-reset-requests": format_duration(decision.reset_requests_s),
        "x-ratelimit-reset-tokens": format_duration(decision.reset_tokens_s),
    }
