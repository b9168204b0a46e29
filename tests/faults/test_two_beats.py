"""Two beat processes (a deployment mistake, or a failover that overlapped) and two orchestrator
workers: still one dispatch cycle at a time, and no outreach claimed twice.

Both beats use django-celery-beat's DatabaseScheduler on the test database, each with its own
in-memory schedule, so each sends its own dispatch task every interval. The orchestrator
workers run under tests/faults/lease_probe.py, which records the span of every cycle that won
the Redis lease (orchestrator/dispatch/singleton.py) and holds the lease 1.5 s, longer than the 1 s interval,
so cycles from the two beats really do collide.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import redis

from config.queues import Queue
from devtools.processes import celery_beat, celery_worker
from devtools.smtp_sink import SMTPSink
from orchestrator.dispatch.singleton import FENCE_KEY
from outreach.models import State
from tests.e2e.conftest import wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.faults.conftest import StackFactory
from tests.faults.helpers import all_in, claims, delivery, pick, sent_events
from tests.faults.lease_probe import read_spans

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HOLD_S = 1.5


def probed_worker(queue: Queue, *, name: str) -> list[str]:
    """The usual worker command line, run through the lease probe instead of plain `celery`."""
    argv = celery_worker(queue, concurrency=2, name=name)
    at = argv.index("-m")  # after `env [VAR=value ...] python`
    assert argv[at + 1] == "celery"
    return [*argv[:at], "-m", "tests.faults.lease_probe", *argv[at + 2 :]]


def test_two_beats_still_run_one_dispatch_cycle_at_a_time_and_claim_each_outreach_once(
    make_stack: StackFactory,
    redis_client: redis.Redis,
    smtp_sink: SMTPSink,
    tmp_path: Path,
    figures: dict[str, object],
) -> None:
    # given two owners' outreach, two beats, and two orchestrator workers whose cycles are slow
    org = make_org()
    owners = [make_owner(organization=org, daily_limit=10_000) for _ in range(2)]
    ids = [make_outreach(lead=make_lead(owner=owners[i % 2])).pk for i in range(pick(8, 40))]
    leases = tmp_path / "leases.log"
    stack = make_stack(
        DISPATCH_MAX_IN_FLIGHT="2",  # many cycles, each claiming a little: many chances to race
        FAULTS_LEASE_LOG=str(leases),
        FAULTS_LEASE_HOLD_S=str(HOLD_S),
    )
    for name in ("orchestrator-a", "orchestrator-b"):
        stack.start(f"worker-{name}", probed_worker(Queue.ORCHESTRATOR, name=name))
    for queue in (Queue.GENERATION, Queue.SEND, Queue.DEAD_LETTER):
        stack.start(f"worker-{queue.value}", celery_worker(queue, concurrency=2))
    # when both beats run
    stack.start("beat-1", celery_beat())
    stack.start("beat-2", celery_beat())
    wait_until(all_in(ids, State.SENT), timeout_s=pick(40, 120), what="every outreach SENT", group=stack)
    stack.stop()  # a warm shutdown lets a cycle in progress finish and record its span
    # then no two cycles ever held the lease at once, though many tried while one ran
    spans = read_spans(str(leases))
    overlaps = [(a, b) for a, b in itertools.pairwise(spans) if b[0] < a[1]]
    assert not overlaps, f"cycles overlapped: {overlaps[:3]}"
    attempts = int(redis_client.get(FENCE_KEY) or 0)
    assert len(spans) >= 2
    assert attempts > len(spans), "no cycle ever found the lease held: the test did not make them collide"
    sends = {
        n: stack.log_dir.joinpath(f"{n}.log").read_text().count("Sending due task")
        for n in ("beat-1", "beat-2")
    }
    assert all(sends.values()), f"a beat sent nothing: {sends}"
    # and each outreach was claimed from the queue once, and sent once
    assert set(claims(ids).values()) == {1}
    assert set(sent_events(ids).values()) == {1}
    seen = delivery(smtp_sink, ids)
    assert seen.received == seen.unique_ids == len(ids)
    figures.update(
        outreach=len(ids),
        beats=2,
        orchestrator_workers=2,
        cycle_attempts=attempts,
        cycles_ran=len(spans),
        cycles_skipped=attempts - len(spans),
        overlapping_cycles=len(overlaps),
        double_claims=0,
        copies=seen.copies,
        beat_sends=sends,
    )
