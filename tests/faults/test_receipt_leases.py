"""A worker SIGKILLed while it holds jobs it has received but not begun (prefork: received in the
parent; threads: started, waiting for their first database read): with leases from receipt
they are back in the queue within the lease TTL, not after DISPATCH_STUCK_AFTER_S (600 s here).

The jobs are held before they begin by an exclusive lock on the outreach table, taken by the
test after the dispatcher moved them to DISPATCHED: the worker receives them, then its first
read waits. The lock goes with the kill, so the dispatcher's recovery runs again.
"""

from __future__ import annotations

import signal
import time

import pytest

from config.queues import Queue
from config.workers import Pool
from devtools.processes import ProcessGroup, celery_beat, celery_worker
from outreach.models import Outreach, OutreachEvent, State
from tests.e2e.conftest import wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.faults.conftest import StackFactory
from tests.faults.helpers import all_in, outreach_table_locked

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

LEASE_TTL_S = 2.0


def received(group: ProcessGroup, name: str) -> int:
    log = group.log_dir / f"{name}.log"
    return log.read_text(errors="replace").count("] received") if log.exists() else 0


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_killed_worker_s_received_jobs_are_back_in_the_queue_within_the_lease_ttl(
    make_stack: StackFactory, pool: Pool, figures: dict[str, object]
) -> None:
    # given two outreach dispatched while no generation worker runs, and production's stuck
    # timeout (600 s) with a short lease
    agent = make_owner(organization=make_org(), daily_limit=100)
    ids = [make_outreach(lead=make_lead(owner=agent)).pk for _ in range(2)]
    stack = make_stack(DISPATCH_STUCK_AFTER_S="600", GENERATION_LEASE_TTL_S=str(LEASE_TTL_S))
    stack.start("worker-orchestrator", celery_worker(Queue.ORCHESTRATOR, concurrency=1))
    stack.start("beat", celery_beat())
    wait_until(all_in(ids, State.DISPATCHED), timeout_s=30, what="both DISPATCHED", group=stack)
    # when a generation worker receives both, cannot begin them, and is SIGKILLed
    with outreach_table_locked():
        stack.start("worker-generation", celery_worker(Queue.GENERATION, concurrency=2, pool=pool))
        wait_until(
            lambda: received(stack, "worker-generation") >= 2, timeout_s=30, what="both received", group=stack
        )
        stack.kill("worker-generation", signal.SIGKILL)
        stack.procs.pop("worker-generation").wait(10)
        killed_at = time.time()
    # then both are back in the queue within seconds (the TTL and a cycle), no attempt charged
    wait_until(lambda: len(_requeued(ids)) == 2, timeout_s=20, what="both requeued", group=stack)
    after_s = max(event.at.timestamp() for event in _requeued(ids)) - killed_at
    assert after_s < 20
    assert set(Outreach.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {0}
    figures.update(pool=pool, received=2, requeued_after_s=round(after_s, 1), stuck_timeout_s=600)


def _requeued(ids: list[int]) -> list[OutreachEvent]:
    return list(
        OutreachEvent.objects.filter(
            outreach_id__in=ids, from_state=State.DISPATCHED, to_state=State.QUEUED, error_class="stuck"
        )
    )
