"""Threads-pool workers and PostgreSQL: many jobs at once, few connections, reused.

Django connections are per thread, so a worker running dozens of jobs could hold dozens of
connections, all idle through seconds of LLM calls. Each job uses the database in short turns
(nurture.writing.generation.database_turn), at most GENERATION_DB_CONNECTIONS per process, on
connections the worker keeps in a pool; this test watches pg_stat_activity while a real worker
runs N jobs against a slow provider.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connection

from config.celery import app
from config.queues import Queue
from devtools.llm_stub import StubResponse
from devtools.processes import celery_worker
from devtools.smtp_sink import SMTPSink
from outreach.models import Outreach, State
from tests.e2e.conftest import wait_until
from tests.factories import make_draft, make_lead, make_org, make_outreach, make_owner
from tests.faults.conftest import StackFactory
from tests.faults.helpers import TimedLLMStub

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

JOBS = 24
DB_TURNS = 4


class ConnectionWatch(threading.Thread):
    """Samples the other backends on this test's database every 20 ms: how many, and which."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        db = connection.settings_dict
        self._conn = psycopg.connect(
            dbname=db["NAME"], user=db["USER"], host=db["HOST"], port=db["PORT"] or 5432, autocommit=True
        )
        self.samples: list[int] = []
        self.backends: set[tuple[int, object]] = set()  # (pid, backend_start): one per connection
        self._halt = threading.Event()

    def count(self) -> int:
        row = self._conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        return int(row[0]) if row else 0

    def backends_now(self) -> set[tuple[int, object]]:
        rows = self._conn.execute(
            "SELECT pid, backend_start FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return {(int(pid), started) for pid, started in rows}

    def run(self) -> None:
        while not self._halt.wait(0.02):
            now = self.backends_now()
            self.samples.append(len(now))
            self.backends |= now

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)
        self._conn.close()


def test_many_jobs_in_a_threads_worker_use_a_bounded_number_of_connections(
    make_stack: StackFactory, stub: TimedLLMStub, figures: dict[str, object]
) -> None:
    # given JOBS dispatched outreach, a provider taking 0.5 s a call (1.5 s of LLM per job), and
    # a generation worker running all of them at once on the threads pool
    agent = make_owner(organization=make_org(), daily_limit=10_000)
    ids = [make_outreach(lead=make_lead(owner=agent), state=State.DISPATCHED).pk for _ in range(JOBS)]
    stub.default = StubResponse(delay_s=0.5)
    stack = make_stack(GENERATION_DB_CONNECTIONS=str(DB_TURNS))
    watch = ConnectionWatch()
    baseline = watch.count()  # this test's own connection
    own = watch.backends_now()
    stack.start("worker-generation", celery_worker(Queue.GENERATION, concurrency=JOBS))
    watch.start()
    # when every job is enqueued at once
    for outreach_id in ids:
        app.send_task("nurture.generate", args=[outreach_id])
    wait_until(
        lambda: Outreach.objects.filter(pk__in=ids).exclude(draft_body="").count() == JOBS,
        timeout_s=90,
        what="every draft written",
        group=stack,
    )
    connection.close()  # the test's own, reopened by the next query
    settle_deadline = time.monotonic() + 10
    while watch.count() > baseline - 1 + DB_TURNS and time.monotonic() < settle_deadline:
        time.sleep(0.1)
    after = watch.count()
    watch.stop()
    # then the worker never held more connections than its turns, though all jobs overlapped
    assert len(stub.requests) >= 3 * JOBS
    peak = max(watch.samples) - baseline
    assert 1 <= peak <= DB_TURNS
    # and it opened no more than that over the whole run: ~6 turns a job on reused
    # connections, not a new PostgreSQL backend for each
    opened = len(watch.backends - own)
    assert 1 <= opened <= DB_TURNS
    # and with the jobs done it keeps at most its turns' connections, for the next jobs
    assert after - (baseline - 1) <= DB_TURNS
    figures.update(
        jobs=JOBS,
        db_turns=DB_TURNS,
        peak_worker_connections=peak,
        connections_opened=opened,
        after=after - (baseline - 1),
    )


def test_a_send_worker_reuses_its_threads_connections_from_task_to_task(
    make_stack: StackFactory, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given 30 dispatched drafts and a send worker of 4 threads (Celery's Django fixup closes a
    # task's connections at its start and end, whatever CONN_MAX_AGE says)
    agent = make_owner(organization=make_org(), daily_limit=10_000)
    ids = [make_draft(lead=make_lead(owner=agent), state=State.DISPATCHED).pk for _ in range(30)]
    threads = 4
    stack = make_stack()
    watch = ConnectionWatch()
    own = watch.backends_now()
    stack.start("worker-send", celery_worker(Queue.SEND, concurrency=threads))
    watch.start()
    # when every send is enqueued at once
    for outreach_id in ids:
        app.send_task("nurture.send", args=[outreach_id])
    wait_until(
        lambda: Outreach.objects.filter(pk__in=ids, state=State.SENT).count() == len(ids),
        timeout_s=90,
        what="every draft sent",
        group=stack,
    )
    watch.stop()
    # then the worker opened no more connections than its threads: each task took one from
    # the worker's pool, not a new PostgreSQL backend
    opened = len(watch.backends - own)
    assert len(smtp_sink.messages) == len(ids)
    assert 1 <= opened <= threads
    figures.update(sends=len(ids), threads=threads, connections_opened=opened)
