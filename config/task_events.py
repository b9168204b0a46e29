"""Celery's task events (`-E`, what Flower shows), published in batches a worker's loop paces.

A worker buffers its task events (received, started, succeeded, ...) and publishes the buffer
as one `task.multi` message. Celery's consumer asks its event loop to flush after every event,
and a job's thread wakes the loop to do it: at a few hundred jobs a minute almost every event
went to the broker alone, a message and a wakeup each (12% of a generation worker's CPU, 5% of
a send worker's: py-spy, bench/latency.py at 3,000 requests/min). Here the first event after a
flush asks the loop to flush EVENTS_FLUSH_S later, and the events of that interval go in that
one message. Flower sees them at most that much later.

The flush is a timer on the loop (entered from the loop's thread: kombu's timer is not
thread-safe). If the timer is lost with it (a connection reset clears timers), the next event
after its due time asks again; the buffer's own limit (24 events) still flushes at once.
Selected by CELERY_WORKER_CONSUMER (config.settings).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from celery.worker.consumer import Consumer as CeleryConsumer

EVENTS_FLUSH_S = 0.25


class FlushPacing:
    """When a buffered event should ask for a flush: only when none is due already (or the one
    due is overdue, so its timer was lost)."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._due = float("-inf")  # monotonic time the asked-for flush runs; -inf: none asked

    def ask(self, now: float) -> bool:
        """True: ask the loop for a flush `every_s` from now (and remember it is due)."""
        if now <= self._due + self.every_s:  # one is due, or only just ran late: it takes this event
            return False
        self._due = now + self.every_s
        return True

    def flushed(self) -> None:
        self._due = float("-inf")


class Consumer(CeleryConsumer):
    """Celery's consumer, its task events flushed at most every EVENTS_FLUSH_S."""

    hub: Any  # Celery's, untyped in its stubs
    _flush_events: Callable[[], None]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._events_pacing = FlushPacing(EVENTS_FLUSH_S)

    def on_send_event_buffered(self) -> None:  # type: ignore[override]  # any thread: a job's, or the loop's
        if self.hub and self._events_pacing.ask(time.monotonic()):
            self.hub.call_soon(self._events_flush_later)

    def _events_flush_later(self) -> None:  # the loop's thread
        self.hub.call_later(EVENTS_FLUSH_S, self._events_flush)

    def _events_flush(self) -> None:
        self._events_pacing.flushed()
        self._flush_events()

    def shutdown(self) -> None:
        self._flush_events()  # what the last interval buffered, before the dispatcher closes
        super().shutdown()
