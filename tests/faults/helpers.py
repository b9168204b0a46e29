"""Fault-injection tools: an own Redis server, a slow SMTP sink, a time-stamping LLM stub, a lock
on the outreach table, and the outcome counts every fault test asserts (states, SENT events,
copies received, Message-IDs).

Imported by tests/faults/conftest.py and the tests; nothing here touches product code.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import psycopg
from django.db import connection

from config.env import database_url
from devtools.llm_stub import LLMStub, StubRequest, StubResponse
from devtools.smtp_sink import SMTPSink
from outreach.models import Outreach, OutreachEvent, State

# CHAOS=1: the long variants (a minute-long provider outage, more outreach, longer Redis outage).
CHAOS = os.environ.get("CHAOS", "") == "1"


def pick(quick: Any, chaos: Any) -> Any:
    """The CI value, or the chaos value under CHAOS=1."""
    return chaos if CHAOS else quick


# --- an LLM stub that time-stamps arrivals and can answer by rule ------------------------------


class TimedLLMStub(LLMStub):
    """LLMStub recording each request's arrival time (time.time()); `rule` may answer a request
    (e.g. 500 for one lead's prompts) before the queue and `default` are consulted."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[float] = []
        self.rule: Callable[[StubRequest], StubResponse | None] | None = None

    def next_response(self, request: StubRequest) -> StubResponse:
        with self._lock:
            self.requests.append(request)
            self.arrivals.append(time.time())
            ruled = self.rule(request) if self.rule else None
            if ruled is not None:
                return ruled
            return self._queue.popleft() if self._queue else self.default

    def arrivals_between(self, start: float, end: float) -> int:
        with self._lock:
            return sum(1 for t in self.arrivals if start <= t < end)


def prompt_text(request: StubRequest) -> str:
    messages = request.json.get("messages", []) if isinstance(request.json, dict) else []
    return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))


# --- a slow database ------------------------------------------------------------------------------


@contextmanager
def outreach_table_locked(mode: Literal["ACCESS EXCLUSIVE", "SHARE"] = "ACCESS EXCLUSIVE") -> Iterator[None]:
    """Hold a lock on the outreach table until the block ends, from a connection of its own (so
    the test's ORM is not inside the lock's transaction). ACCESS EXCLUSIVE: nobody reads or
    writes outreach; SHARE: everyone reads (and locks rows), and every write waits."""
    with psycopg.connect(database_url(connection.settings_dict)) as conn:
        conn.execute(f"LOCK TABLE {Outreach._meta.db_table} IN {mode} MODE")
        yield
        conn.rollback()


def writes_waiting() -> int:
    """Statements that wait for a lock to update the outreach table (pg_stat_activity): an UPDATE,
    or a statement with one inside (a claim locks, moves and writes history in one)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query LIKE %s",
            [f'%UPDATE "{Outreach._meta.db_table}"%'],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


# --- outcomes ------------------------------------------------------------------------------------


def states(ids: Iterable[int]) -> Counter[str]:
    return Counter(Outreach.objects.filter(pk__in=list(ids)).values_list("state", flat=True))


def all_in(ids: list[int], state: State) -> Callable[[], bool]:
    return lambda: states(ids)[state] == len(ids)


def sent_events(ids: Iterable[int]) -> Counter[int]:
    """SENT recorded per outreach: the state machine allows it once; this checks it."""
    return Counter(
        OutreachEvent.objects.filter(outreach_id__in=list(ids), to_state=State.SENT).values_list(
            "outreach_id", flat=True
        )
    )


def claims(ids: Iterable[int]) -> Counter[int]:
    """Claims from the queue per outreach (QUEUED -> DISPATCHED events)."""
    return Counter(
        OutreachEvent.objects.filter(
            outreach_id__in=list(ids), from_state=State.QUEUED, to_state=State.DISPATCHED
        ).values_list("outreach_id", flat=True)
    )


@dataclass(frozen=True)
class Delivery:
    """What the receiving side saw: copies beyond one per outreach, and distinct Message-IDs."""

    received: int
    unique_ids: int
    copies: int
    ids_match_db: bool


def delivery(sink: SMTPSink, ids: list[int]) -> Delivery:
    received = [str(m.message["Message-ID"]) for m in sink.messages]
    recorded = set(Outreach.objects.filter(pk__in=ids).values_list("message_id", flat=True))
    return Delivery(
        received=len(received),
        unique_ids=len(set(received)),
        copies=len(received) - len(set(received)),
        ids_match_db=set(received) == recorded,
    )


def first_sent_after(ids: list[int], moment: float) -> float | None:
    """Seconds from `moment` (time.time()) to the first SENT after it, None if none."""
    times = [
        t.timestamp()
        for t in Outreach.objects.filter(pk__in=ids, sent_at__isnull=False).values_list("sent_at", flat=True)
        if t is not None and t.timestamp() >= moment
    ]
    return round(min(times) - moment, 2) if times else None


def last_sent(ids: list[int]) -> float:
    times = Outreach.objects.filter(pk__in=ids, sent_at__isnull=False).values_list("sent_at", flat=True)
    return max(t.timestamp() for t in times if t is not None)


class Repeater(threading.Thread):
    """Call `action` every `every_s` seconds in the background until stopped (a fault injector)."""

    def __init__(self, action: Callable[[], object], *, every_s: float, times: int) -> None:
        super().__init__(daemon=True)
        self.action, self.every_s, self.times = action, every_s, times
        self.results: list[object] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()

    def run(self) -> None:
        for _ in range(self.times):
            if self._stop.wait(self.every_s):
                return
            try:
                self.results.append(self.action())
            except BaseException as exc:  # reported by the test, never lost in a thread
                self.errors.append(exc)

    def stop(self) -> None:
        self._stop.set()
        self.join(timeout=10)
