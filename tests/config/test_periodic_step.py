"""A worker bootstep that does one thing every interval from a daemon thread (config.periodic_step),
started and stopped for real: the base of the presence beat and the heap trim."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import pytest

from config.periodic_step import PeriodicStep


class CountingStep(PeriodicStep):
    """Counts its ticks; raises on the ticks listed in `raise_on`, ends after tick `final` if given."""

    thread_name = "test-counting-step"
    interval_s = 0.02

    def __init__(self, worker: Any, *, raise_on: Collection[int] = (), final: int = 0) -> None:
        super().__init__(worker)
        self.ticks = 0
        self.stops = 0
        self.raise_on = raise_on
        self.final = final

    def tick(self) -> bool:
        self.ticks += 1
        if self.ticks in self.raise_on:
            raise RuntimeError(f"tick {self.ticks} fails")
        return self.ticks != self.final

    def stop(self, worker: Any) -> None:
        super().stop(worker)
        self.stops += 1


class CountingAtStartStep(CountingStep):
    tick_at_start = True


def _until(check: Callable[[], bool], *, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not check() and time.monotonic() < deadline:
        time.sleep(0.01)
    return check()


def _running() -> bool:
    return any(t.name == CountingStep.thread_name for t in threading.enumerate())


def test_it_ticks_every_interval_until_stopped_and_its_thread_ends() -> None:
    # given a started step
    step = CountingStep(worker=None)
    step.start(worker=None)
    assert _running()
    assert _until(lambda: step.ticks >= 3)
    # when it is stopped
    step.stop(worker=None)
    # then its thread has ended (joined) and it ticks no more
    assert not _running()
    stopped_at = step.ticks
    time.sleep(0.1)
    assert step.ticks == stopped_at


def test_its_thread_is_a_daemon() -> None:
    step = CountingStep(worker=None)
    step.start(worker=None)
    try:
        threads = [t for t in threading.enumerate() if t.name == CountingStep.thread_name]
        assert [t.daemon for t in threads] == [True]
    finally:
        step.stop(worker=None)


def test_terminate_stops_it_through_the_subclass_stop() -> None:
    # given a started step that has ticked
    step = CountingStep(worker=None)
    step.start(worker=None)
    assert _until(lambda: step.ticks >= 1)
    # when the worker terminates its steps (a cold shutdown)
    step.terminate(worker=None)
    # then the step's own stop ran (what it cleans up is cleaned up), and the thread has ended
    assert step.stops == 1
    assert not _running()


def test_a_tick_that_raises_is_logged_and_the_next_comes_on_time(caplog: pytest.LogCaptureFixture) -> None:
    # given a step whose first two ticks raise
    step = CountingStep(worker=None, raise_on=(1, 2))
    # when it runs
    with caplog.at_level(logging.WARNING, logger="config.periodic_step"):
        step.start(worker=None)
        ticked = _until(lambda: step.ticks >= 4)
        step.stop(worker=None)
    # then it ticked on after them, and each failure was logged with its traceback
    assert ticked
    failures = [r for r in caplog.records if r.name == "config.periodic_step"]
    assert [r.getMessage() for r in failures] == ["test-counting-step: tick failed"] * 2
    assert all(r.exc_info is not None for r in failures)


def test_a_tick_that_returns_false_ends_the_thread() -> None:
    # given a step whose second tick says it was the last
    step = CountingStep(worker=None, final=2)
    # when it runs
    step.start(worker=None)
    # then its thread ends by itself after that tick, and a stop afterwards is harmless
    assert _until(lambda: not _running())
    assert step.ticks == 2
    step.stop(worker=None)
    assert step.ticks == 2


def test_the_first_tick_comes_an_interval_after_start_by_default() -> None:
    step = CountingStep(worker=None)
    step.interval_s = 5.0
    step.start(worker=None)
    time.sleep(0.2)
    step.stop(worker=None)
    assert step.ticks == 0


def test_the_first_tick_comes_at_start_when_the_step_asks() -> None:
    # given a step that ticks at start, with an interval longer than the test
    step = CountingAtStartStep(worker=None)
    step.interval_s = 5.0
    # when it starts
    step.start(worker=None)
    # then it ticks at once, and not again before the interval
    assert _until(lambda: step.ticks == 1, timeout_s=1.0)
    time.sleep(0.1)
    step.stop(worker=None)
    assert step.ticks == 1


def test_a_step_stopped_before_it_ever_started_stops_quietly() -> None:
    step = CountingStep(worker=None)
    step.stop(worker=None)
    step.terminate(worker=None)
    assert step.ticks == 0
    assert step.stops == 2
