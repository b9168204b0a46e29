"""config.task_events.FlushPacing: one flush asked per interval, asked again once one is lost."""

from __future__ import annotations

from config.task_events import FlushPacing


def test_the_first_event_asks_for_a_flush_and_the_interval_s_events_ride_with_it() -> None:
    pacing = FlushPacing(0.25)
    assert pacing.ask(10.0)
    assert not pacing.ask(10.1)
    assert not pacing.ask(10.24)


def test_after_the_flush_the_next_event_asks_again() -> None:
    pacing = FlushPacing(0.25)
    assert pacing.ask(10.0)
    pacing.flushed()
    assert pacing.ask(10.26)


def test_a_flush_that_never_ran_is_asked_again_once_it_is_an_interval_overdue() -> None:
    # given a flush asked at 10.0 (due 10.25) whose timer was lost with a connection reset
    pacing = FlushPacing(0.25)
    assert pacing.ask(10.0)
    # then events while it could still run ride with it, and the first after that asks again
    assert not pacing.ask(10.5)
    assert pacing.ask(10.51)
