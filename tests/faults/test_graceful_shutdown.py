"""Workers stopped as a platform stops them on a deploy: SIGTERM to the worker's main process,
then SIGKILL once the service's grace period (docker-compose.yml's `stop_grace_period`; Docker's
default, 10 s, where none is set) has passed.

A generation worker stopped mid LLM call (llm_sim answering each call in 4 s, so a job's three
calls outlast Docker's default) and a send worker stopped while the mail server holds its
email (answering after 12 s): each finishes its job before it exits, so nothing is lost,
nothing is paid for twice or sent twice, and no reservation is left behind.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from config.queues import Queue
from config.workers import WORKERS
from devtools.llm_sim import LLMSim
from devtools.processes import ProcessGroup, celery_beat, celery_worker
from devtools.smtp_sink import SMTPSink
from orchestrator.work import get_budget
from outreach.models import Outreach, OutreachEvent, State
from tests.e2e.conftest import wait_until
from tests.factories import make_draft, make_lead, make_org, make_outreach, make_owner
from tests.faults.conftest import StackFactory
from tests.faults.helpers import all_in, delivery, sent_events, states

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
DOCKER_DEFAULT_GRACE_S = 10.0
CALLS_PER_JOB = 3  # plan, context, message


@pytest.fixture
def slow_sim() -> Iterator[LLMSim]:
    provider = LLMSim(rpm=600, tpm=1_000_000, latency_ms=4000, jitter_ms=0)
    provider.start()
    yield provider
    provider.stop()


def grace_s(queue: Queue) -> float:
    """The compose service's stop_grace_period ("90s", "1m30s"), or Docker's default."""
    service = yaml.safe_load(COMPOSE.read_text())["services"][WORKERS[queue].service]
    period = str(service.get("stop_grace_period", ""))
    if not period:
        return DOCKER_DEFAULT_GRACE_S
    parts = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", period)
    assert parts, f"unreadable stop_grace_period {period!r}"
    return 60.0 * int(parts[1] or 0) + int(parts[2] or 0)


def platform_stop(group: ProcessGroup, name: str, *, grace: float) -> bool:
    """SIGTERM to the main process, SIGKILL to what is left after `grace`; True if it exited
    by itself."""
    proc = group.procs.pop(name)
    os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(grace)
        return True
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return False


def start_workers(group: ProcessGroup, *queues: Queue) -> None:
    """Beat and the workers of `queues` only (2 slots each), named `worker-<queue>`."""
    for queue in queues:
        group.start(f"worker-{queue.value}", celery_worker(queue, concurrency=2))
    group.start("beat", celery_beat())


def _autonomous_outreach(count: int) -> list[int]:
    agent = make_owner(organization=make_org(), daily_limit=100)
    return [make_outreach(lead=make_lead(owner=agent)).pk for _ in range(count)]


def test_a_generation_worker_stopped_mid_call_finishes_its_jobs_before_it_exits(
    make_stack: StackFactory, slow_sim: LLMSim, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given two outreach being written, each job mid its first 4 s call
    ids = _autonomous_outreach(2)
    stack = make_stack(llm_base_url=slow_sim.base_url, DISPATCH_STUCK_AFTER_S="600")
    start_workers(stack, Queue.ORCHESTRATOR, Queue.GENERATION, Queue.SEND)
    wait_until(
        lambda: states(ids)[State.GENERATING] == 2 and slow_sim.stats()["in_flight"] == 2,
        timeout_s=30,
        what="both jobs mid-call",
        group=stack,
    )
    # when the platform stops the generation worker
    stopped_at = time.monotonic()
    exited = platform_stop(stack, "worker-generation", grace=grace_s(Queue.GENERATION))
    stop_s = time.monotonic() - stopped_at
    # then it exited by itself, its jobs done: each outreach sent once, three calls a job
    assert exited, f"SIGKILLed after the {grace_s(Queue.GENERATION)} s grace"
    assert stop_s < 60, "waited out the whole WORKER_SHUTDOWN_GRACE_S though its jobs were done"
    wait_until(all_in(ids, State.SENT), timeout_s=30, what="both SENT", group=stack)
    assert slow_sim.stats()["requests"] == CALLS_PER_JOB * len(ids)
    assert set(sent_events(ids).values()) == {1}
    assert delivery(smtp_sink, ids).copies == 0
    assert not OutreachEvent.objects.filter(outreach_id__in=ids, error_class="stuck").exists()
    # and no reservation is left outstanding
    assert get_budget().snapshot()["in_flight"] == 0
    figures.update(outreach=len(ids), stop_s=round(stop_s, 1), llm_requests=slow_sim.stats()["requests"])


def test_a_send_worker_stopped_mid_send_finishes_its_email_before_it_exits(
    make_stack: StackFactory, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given an approved draft whose email the mail server holds 12 s before it answers
    ids = [make_draft(lead=make_lead(owner=make_owner(daily_limit=100)), state=State.APPROVED).pk]
    smtp_sink.data_delay_s = 12.0
    stack = make_stack(DISPATCH_STUCK_AFTER_S="600")
    start_workers(stack, Queue.ORCHESTRATOR, Queue.SEND)
    wait_until(
        lambda: len(smtp_sink.messages) == 1, timeout_s=30, what="the email at the server", group=stack
    )
    # when the platform stops the send worker
    stopped_at = time.monotonic()
    exited = platform_stop(stack, "worker-send", grace=grace_s(Queue.SEND))
    stop_s = time.monotonic() - stopped_at
    # then it exited by itself once the server answered, the email recorded SENT once: no
    # "possibly sent", no resend
    assert exited, f"SIGKILLed after the {grace_s(Queue.SEND)} s grace"
    assert states(ids)[State.SENT] == 1
    assert set(sent_events(ids).values()) == {1}
    seen = delivery(smtp_sink, ids)
    assert (seen.received, seen.copies) == (1, 0)
    figures.update(outreach=1, stop_s=round(stop_s, 1))


def test_a_generation_job_outlasting_the_grace_hands_back_and_runs_again_once(
    make_stack: StackFactory, slow_sim: LLMSim, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given one outreach mid its first 4 s call, on a worker whose grace is 1 s
    ids = _autonomous_outreach(1)
    stack = make_stack(
        llm_base_url=slow_sim.base_url, DISPATCH_STUCK_AFTER_S="600", WORKER_SHUTDOWN_GRACE_S="1"
    )
    start_workers(stack, Queue.ORCHESTRATOR, Queue.GENERATION, Queue.SEND)
    wait_until(
        lambda: states(ids)[State.GENERATING] == 1 and slow_sim.stats()["in_flight"] == 1,
        timeout_s=30,
        what="the job mid-call",
        group=stack,
    )
    # when the platform stops the generation worker, then a new one starts
    exited = platform_stop(stack, "worker-generation", grace=grace_s(Queue.GENERATION))
    handed_back = OutreachEvent.objects.filter(
        outreach_id__in=ids, from_state=State.GENERATING, to_state=State.QUEUED, note__contains="handed back"
    )
    assert exited
    assert handed_back.count() == 1
    stack.start("worker-generation-2", celery_worker(Queue.GENERATION, concurrency=2, name="generation2"))
    # then the job ran again from the start, with no attempt charged, and was sent once
    wait_until(all_in(ids, State.SENT), timeout_s=40, what="SENT", group=stack)
    assert set(Outreach.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {0}
    assert slow_sim.stats()["requests"] == 1 + CALLS_PER_JOB  # the call in progress, then a whole job
    assert set(sent_events(ids).values()) == {1}
    # and the reservations of both runs are settled, none left outstanding
    assert get_budget().snapshot()["in_flight"] == 0
    figures.update(outreach=1, handed_back=1, llm_requests=slow_sim.stats()["requests"])
