"""Freed heap memory handed back to the system in Celery workers: glibc's `malloc_trim(0)`
every WORKER_MALLOC_TRIM_S seconds (0: never), from a worker bootstep's daemon thread
(config.periodic_step).

A threads-pool worker's 200 threads allocate from glibc's per-thread arenas (up to eight per
core). What a job frees stays in its arena for the next allocation there, and an arena gives
pages back only from its top, so the worker's RSS kept what its busiest minutes had ever held:
bench/soak.py at 3,000 requests/min (2026-11-27) saw the generation worker grow 178 -> 209 MB
over 110 minutes, ever more slowly, with about 90 MB in some twenty arenas. `malloc_trim(0)`
returns every arena's free pages (madvise), not only the top: at minute 10 of a later soak (a
diagnostic run, tracemalloc on), one call gave back 17 MB of the generation worker's 216. Fewer arenas (MALLOC_ARENA_MAX=2) did not
slow the growth in the soak's first 15 minutes, so the trim, not the arena count, is the lever.

A call walks the arenas with the GIL released (ctypes), holding each arena's lock only while
trimming it: the jobs' threads wait at most that long for an allocation. Not glibc (musl,
macOS): there is nothing to call, and the step does nothing. Prefork pools run their tasks in
child processes the step does not reach; their parents hold little, and their children are
replaced as Celery's limits say.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from typing import Any

from config.periodic_step import PeriodicStep

log = logging.getLogger(__name__)


def malloc_trim_function() -> Callable[[], int] | None:
    """glibc's malloc_trim(0) (1: memory was released, 0: none), or None where libc has none."""
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: int(trim(0))


class MallocTrimStep(PeriodicStep):
    """Trims the worker's heap every WORKER_MALLOC_TRIM_S seconds while it runs."""

    thread_name = "malloc-trim"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        from django.conf import settings

        self.interval_s = settings.WORKER_MALLOC_TRIM_S
        self.trim = malloc_trim_function()
        self.trims = 0  # calls made (the tests read it)

    def start(self, worker: Any) -> None:
        if self.trim is None or self.interval_s <= 0:
            return
        super().start(worker)

    def tick(self) -> bool:
        assert self.trim is not None
        try:
            self.trim()
        except Exception as exc:  # never expected; the thread ends, the worker works on untrimmed
            log.warning("malloc_trim failed: %s", exc)
            return False
        self.trims += 1
        return True
