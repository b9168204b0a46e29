"""Python's cyclic garbage collector in the processes that run tasks: what a process loaded to
start (Django, Celery, the app, its tasks) frozen out of the collector's scans, and the young
generation collected every GC_YOUNG allocations instead of CPython's 700.

The dispatcher's cycle allocates tens of thousands of objects that live through the cycle
(every active owner's row, the schedule's tags, the picks' messages). With CPython's defaults
they pushed the collector through 85 young, 8 middle and most of one full collection a cycle,
each full one scanning the whole heap of about 150,000 objects: 45-60 ms of a 10,000-owner
cycle, and its jitter (bench/dispatch.py, 2026-12-05). Frozen and with the young threshold
raised to 10,000, 6-10 ms. A cycle's objects alive at once peak about 10,500 above what lives
between cycles (19,400 counted at 10,000 and at 40,000 active owners alike: they follow the
window and the slots, not the owners), so at 10,000 the cycle still crossed the threshold
once a cycle, and each young collection found nothing to free: 3-4 ms of a 10,000-owner cycle
(2026-12-06). At 50,000, none in 120 cycles. Reference counting still frees at once what has
no cycle; only cyclic garbage waits longer, up to GC_YOUNG more allocations.

Set once the process has what it runs on: a worker at `worker_init` (its task modules are
imported by then) and each prefork child at `worker_process_init` (after the fork, so its
inherited pages are not written to by the collector either); bench/dispatch.py calls it as
the orchestrator worker's child does, since it runs the cycle in its own process.
"""

from __future__ import annotations

import gc

GC_YOUNG = 50_000  # allocations (less deallocations) between young collections; CPython: 700


def collector_settle() -> None:
    """Collect once, freeze what survives (it is never scanned again), and raise the young
    generation's threshold; the older generations keep their ratios."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG, middle, old)
