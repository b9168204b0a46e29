"""A worker bootstep that does one thing every `interval_s` seconds from a daemon thread of its
own, while the worker runs: config.worker_presence's beat and config.memory's heap trim.

A thread, not a beat task or a timer of the pool: it runs in the worker's parent process
whichever pool runs the tasks, and however busy that pool is. A daemon, so a worker that exits
without stopping its steps is not held by it. A subclass names its thread, sets `interval_s`
and writes `tick()`; it extends `start` (to decide whether to run at all, or to read the worker
first) and `stop` (to clean up once the thread has ended), calling the base's.

Celery's worker blueprint starts the steps in order, closes them, then calls each step's `stop`
on a warm shutdown or its `terminate` on a cold one (celery.bootsteps.Blueprint.stop), once.
Worker steps get no `shutdown` (only the consumer's steps do), and a step with no `create()`
has no `obj` for StartStopStep's methods to delegate to, so this class writes all three.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, ClassVar

from celery import bootsteps

log = logging.getLogger(__name__)

JOIN_TIMEOUT_S = 2.0  # a stopping worker waits at most this for a tick under way


class PeriodicStep(bootsteps.StartStopStep):
    """Calls `tick()` every `interval_s` seconds from a daemon thread, from `start` to `stop`."""

    thread_name: ClassVar[str]
    interval_s: float
    # True: the first tick comes as the thread starts, then one every interval_s; False: the
    # first comes interval_s after start.
    tick_at_start: ClassVar[bool] = False

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> bool:
        """Does the step's one thing; True to tick again at the next interval, False to end the
        thread. An exception is logged and the next tick comes on time."""
        raise NotImplementedError

    def start(self, worker: Any) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
        self._thread.start()

    def stop(self, worker: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=JOIN_TIMEOUT_S)

    def terminate(self, worker: Any) -> None:
        """A cold shutdown (SIGQUIT, and SIGTERM on the threads lines: config.workers remaps it)
        terminates the bootsteps instead of stopping them: stop all the same, so what a
        subclass's `stop` cleans up is cleaned up on either path."""
        self.stop(worker)

    def _run(self) -> None:
        # wait(0) returns at once, saying whether stop came before the thread ran
        wait_s = 0.0 if self.tick_at_start else self.interval_s
        while not self._stop.wait(wait_s):
            wait_s = self.interval_s
            try:
                again = self.tick()
            except Exception:  # a bug in a tick: the worker works on, and so does the step
                log.exception("%s: tick failed", self.thread_name)
                continue
            if not again:
                return
