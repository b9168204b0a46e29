"""A real worker's task events (what Flower shows) reach the broker in batches, none lost, none
late by more than the flush interval (config.task_events)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from config.celery import app
from config.queues import Queue
from config.task_events import EVENTS_FLUSH_S
from devtools.processes import ProcessGroup, celery_worker
from orchestrator.dispatch.cycle.enqueue import SEND_TASK
from outreach.models import State
from tests.factories import make_outreach

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

TASKS = 60
SPACING_S = 0.05  # 20 jobs a second: each job's events once went to the broker one by one


class _Recorder:
    """Celery's event receiver in a thread of this process, keeping each message's events and
    when it arrived."""

    def __init__(self) -> None:
        self.messages: list[tuple[float, list[dict[str, Any]]]] = []
        self.lock = threading.Lock()
        self.receiver: Any = None

    def run(self) -> None:
        recorder = self

        class Receiver(app.events.Receiver):  # type: ignore[name-defined]
            def _receive(self, body: Any, message: Any, **kwargs: Any) -> None:
                with recorder.lock:
                    recorder.messages.append((time.time(), body if isinstance(body, list) else [body]))

        with app.connection_for_read() as connection:
            self.receiver = Receiver(connection, handlers={"*": lambda event: None}, app=app)
            self.receiver.capture(limit=None, timeout=None, wakeup=False)

    def events(self, *, kind: str | None = None) -> list[tuple[float, dict[str, Any]]]:
        with self.lock:
            return [
                (at, event)
                for at, body in self.messages
                for event in body
                if kind is None or event.get("type") == kind
            ]

    def until(self, check: Any, *, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True


def test_a_workers_task_events_arrive_batched_and_none_lost(stack: ProcessGroup) -> None:
    # given a send worker as the recipe runs it (-E), and Flower's kind of listener on the events
    done = make_outreach(state=State.SENT)  # each job finds it sent already: a quick no-op
    recorder = _Recorder()
    listening = threading.Thread(target=recorder.run, daemon=True)
    listening.start()
    try:
        stack.start("worker-send", celery_worker(Queue.SEND, concurrency=4))
        assert recorder.until(
            lambda: recorder.events(kind="worker-online") or recorder.events(kind="worker-heartbeat"),
            timeout_s=60,
        ), "the worker never said it was online"
        # when jobs arrive one at a time, 20 a second for 3 s
        ids = []
        for _ in range(TASKS):
            ids.append(app.send_task(SEND_TASK, args=[done.pk]).id)
            time.sleep(SPACING_S)
        # then every job's received, started and succeeded events arrive
        wanted = {
            (task_id, kind) for task_id in ids for kind in ("task-received", "task-started", "task-succeeded")
        }

        def arrived() -> set[tuple[Any, Any]]:
            return {(e.get("uuid"), e["type"]) for _, e in recorder.events() if e.get("uuid") in set(ids)}

        assert recorder.until(lambda: wanted <= arrived(), timeout_s=30), (
            f"missing: {sorted(wanted - arrived())[:5]}"
        )
        mine = [(at, e) for at, e in recorder.events() if e.get("uuid") in set(ids)]
        assert Counter(e["type"] for _, e in mine) == Counter(
            {"task-received": TASKS, "task-started": TASKS, "task-succeeded": TASKS}
        ), "an event arrived twice"
        # and they came in batches: a message every flush interval, not one per event
        messages = [body for _, body in recorder.messages if any(e.get("uuid") in set(ids) for e in body)]
        assert len(mine) / len(messages) >= 4, f"{len(mine)} events in {len(messages)} messages"
        # and none waited much longer than the interval (the event's own clock to its arrival)
        late = max(at - e["timestamp"] for at, e in mine)
        assert late < EVENTS_FLUSH_S + 0.75, f"an event arrived {late:.2f} s after it happened"
    finally:
        if recorder.receiver is not None:
            recorder.receiver.should_stop = True
        listening.join(timeout=10)
