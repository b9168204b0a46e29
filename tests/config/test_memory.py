"""Workers hand freed heap memory back to the system (config.memory): glibc's malloc_trim, from
a worker bootstep, every WORKER_MALLOC_TRIM_S."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from config.celery import app
from config.memory import MallocTrimStep, malloc_trim_function


def _rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * 4096 / 2**20


def test_a_trim_gives_back_what_threads_freed_in_their_arenas() -> None:
    # given a thread that allocated 180 MB in its malloc arena and freed all but every 50th
    # block (so the arena's top stays in use and cannot shrink by itself)
    trim = malloc_trim_function()
    assert trim is not None, "this machine's libc is glibc"
    kept: list[bytearray] = []

    def work() -> None:
        blocks = [bytearray(60_000) for _ in range(3000)]
        kept.extend(blocks[::50])

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    before = _rss_mb()
    # when the heap is trimmed
    assert trim() in (0, 1)
    # then most of what was freed has left the process, and what was kept is intact
    assert before - _rss_mb() > 100
    assert len(kept) == 60
    assert all(len(block) == 60_000 for block in kept)


def test_the_step_trims_every_interval_while_the_worker_runs(settings: Any) -> None:
    settings.WORKER_MALLOC_TRIM_S = 0.05
    step = MallocTrimStep(worker=None)
    step.start(worker=None)
    deadline = time.monotonic() + 5
    while step.trims < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    step.stop(worker=None)
    assert step.trims >= 3
    stopped_at = step.trims
    time.sleep(0.2)
    assert step.trims == stopped_at  # stopped with the worker
    assert not any(t.name == "malloc-trim" for t in threading.enumerate())


def test_no_trim_when_switched_off(settings: Any) -> None:
    settings.WORKER_MALLOC_TRIM_S = 0.0
    step = MallocTrimStep(worker=None)
    step.start(worker=None)
    time.sleep(0.1)
    step.stop(worker=None)
    assert step.trims == 0


def test_every_worker_runs_the_step() -> None:
    assert MallocTrimStep in app.steps["worker"]
