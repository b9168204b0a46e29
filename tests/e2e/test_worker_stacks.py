"""A stuck worker can say what it is doing: SIGUSR2 makes a Celery worker, and each of its
prefork children, write every thread's stack to its log (config.celery), which is what a faults
or e2e test's timeout leaves behind (ProcessGroup.stacks_dump, from tests/e2e/conftest.wait_until)."""

from __future__ import annotations

import time

import pytest

from config.queues import Queue
from devtools.processes import ProcessGroup, celery_worker
from tests.e2e.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_prefork_worker_and_its_child_write_their_stacks_on_sigusr2(stack: ProcessGroup) -> None:
    # given a prefork worker (the orchestrator's recipe: one child) that is ready; its log is
    # appended to across runs, so only what this run wrote is read
    log = stack.log_dir / "worker-orchestrator.log"
    start = log.stat().st_size if log.exists() else 0

    def written() -> str:
        if not log.exists():
            return ""
        with log.open("rb") as f:
            f.seek(start)
            return f.read().decode(errors="replace")

    stack.start("worker-orchestrator", celery_worker(Queue.ORCHESTRATOR, concurrency=1))
    wait_until(lambda: " ready." in written(), timeout_s=60, what="the worker ready")
    # when the group dumps its workers' stacks
    stack.stacks_dump()
    # then both processes wrote theirs (the thread the signal landed on, then the others) and
    # kept running: the parent's bootstep threads (presence, heap trim) are among its stacks
    deadline = time.monotonic() + 10
    while written().count("Current thread 0x") < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    text = written()
    assert text.count("Current thread 0x") == 2, text[-3000:]
    assert "periodic_step.py" in text
    assert "billiard/pool.py" in text  # the child, waiting for its next task
    assert stack.dead() == []
