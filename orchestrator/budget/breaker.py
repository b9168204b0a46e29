"""A small per-process circuit breaker in front of the budget's Redis calls.

Without it every budget call during a Redis outage would wait out a socket timeout; with it,
after `failures` consecutive errors the budget stops trying for `cooldown_s` and answers from
its failure policy at once. After the cool-down one trial call goes through (half-open): a
success closes the circuit, a failure opens it for another cool-down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(
        self, *, failures: int = 3, cooldown_s: float = 5.0, clock: Callable[[], float] = time.monotonic
    ):
        self._threshold = failures
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._opened_at: float | None = None
        self._trial_running = False

    @property
    def state(self) -> State:
        if self._opened_at is None:
            return "closed"
        return "half_open" if self._clock() - self._opened_at >= self._cooldown_s else "open"

    def allow(self) -> bool:
        """May this call try Redis? In half-open state only one caller at a time may."""
        if self._opened_at is None:  # the hot path: no lock while all is well
            return True
        with self._lock:
            state = self.state
            if state == "closed":
                return True
            if state == "half_open" and not self._trial_running:
                self._trial_running = True
                return True
            return False

    def success(self) -> None:
        if self._failures == 0 and self._opened_at is None:
            return
        with self._lock:
            self._failures = 0
            self._opened_at = None
            self._trial_running = False

    def failure(self) -> None:
        with self._lock:
            self._failures += 1
            self._trial_running = False
            if self._opened_at is not None or self._failures >= self._threshold:
                self._opened_at = self._clock()

    def retry_in_ms(self) -> int:
        """Milliseconds until the next trial call (0 when closed)."""
        if self._opened_at is None:
            return 0
        return max(0, int((self._opened_at + self._cooldown_s - self._clock()) * 1000))
