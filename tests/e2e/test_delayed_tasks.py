"""A task with a countdown on the orchestrator queue (retention's continuation, `prune`) never
holds up the dispatch cycles behind it. On RabbitMQ quorum queues a worker cannot raise its
prefetch for a waiting task, so the queues sit on a topic exchange and the broker holds the
message until its time (native delayed delivery, config/settings.py CELERY_TASK_QUEUES);
scripts/test.sh runs this file on Redis (the main pass) and on quorum queues (its RabbitMQ pass)."""

from __future__ import annotations

import pytest

from config.queues import Queue
from devtools.processes import ProcessGroup, celery_beat, celery_worker
from orchestrator.tasks import prune
from tests.e2e.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

COUNTDOWN_S = 8  # the e2e stack runs a cycle a second (DISPATCH_INTERVAL=1): ~8 cycles meanwhile
PRUNE_LINE = "retention prune: "  # orchestrator.tasks.prune's log line
CYCLE_LINE = " dispatch cycle "  # one a cycle (tests/e2e/conftest.py dispatch_cycles)


def _log(stack: ProcessGroup) -> str:
    path = stack.log_dir / f"worker-{Queue.ORCHESTRATOR.value}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_countdown_task_on_the_orchestrator_queue_leaves_dispatch_cycles_running(
    stack: ProcessGroup,
) -> None:
    # given the orchestrator worker as the recipe runs it (one prefork process) and beat,
    # running cycles (the log is appended to across runs: read only what this run wrote)
    begin = len(_log(stack))
    stack.start(f"worker-{Queue.ORCHESTRATOR.value}", celery_worker(Queue.ORCHESTRATOR))
    stack.start("beat", celery_beat())
    wait_until(
        lambda: CYCLE_LINE in _log(stack)[begin:], timeout_s=30, what="a first dispatch cycle", group=stack
    )
    # when a task is queued there to run a few seconds later
    start = len(_log(stack))
    prune.apply_async(countdown=COUNTDOWN_S)
    # then it runs once its time comes (the broker delivered it)...
    wait_until(
        lambda: PRUNE_LINE in _log(stack)[start:],
        timeout_s=COUNTDOWN_S + 20,
        what="the delayed prune",
        group=stack,
    )
    # ...and the cycles went on while it waited, not held behind it
    waiting = _log(stack)[start:].split(PRUNE_LINE, 1)[0].count(CYCLE_LINE)
    assert waiting >= 3, (
        f"{waiting} dispatch cycles in the {COUNTDOWN_S} s the prune waited; logs in {stack.log_dir}"
    )
