"""Workers SIGKILLed in the two places that matter: mid-LLM-call, and after the mail server took
the message but before SENT was recorded (the at-least-once boundary).

The single-outreach generation kill lives in tests/e2e/test_pipeline_workers.py; here it is
counted over several outreach.
"""

from __future__ import annotations

import functools
import signal
import time

import pytest

from config.queues import Queue
from devtools.llm_stub import StubResponse
from devtools.processes import celery_beat, celery_worker
from devtools.smtp_sink import SMTPSink
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, OutreachEvent, State
from tests.e2e.conftest import dispatch_cycles, start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.faults.conftest import StackFactory
from tests.faults.helpers import (
    TimedLLMStub,
    all_in,
    delivery,
    pick,
    sent_events,
    states,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _autonomous_outreach(count: int) -> list[int]:
    agent = make_owner(organization=make_org(), daily_limit=10_000)
    return [make_outreach(lead=make_lead(owner=agent)).pk for _ in range(count)]


def test_send_worker_killed_after_the_server_took_the_message_resends_with_the_same_message_id(
    make_stack: StackFactory, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given autonomous outreach and a mail server that stores each message, then waits 3 s to say 250
    ids = _autonomous_outreach(pick(6, 24))
    smtp_sink.data_delay_s = 3.0
    stack = make_stack()
    start_pipeline(stack)
    wait_until(
        lambda: len(smtp_sink.messages) >= 1, timeout_s=30, what="a message at the server", group=stack
    )
    # when the send worker (main process and pool) is SIGKILLed while the server holds the message
    stack.kill("worker-send", signal.SIGKILL)
    stack.procs.pop("worker-send").wait(10)
    at_kill = states(ids)
    held_by_server = len(smtp_sink.messages)
    smtp_sink.data_delay_s = 0.0
    stack.start("worker-send-2", celery_worker(Queue.SEND, concurrency=2, name="send2"))
    # then every outreach ends SENT, recorded once, nothing lost
    wait_until(all_in(ids, State.SENT), timeout_s=pick(40, 90), what="every outreach SENT", group=stack)
    assert set(sent_events(ids).values()) == {1}
    # and a resend carries the same Message-ID: the receiving side sees one id per outreach
    seen = delivery(smtp_sink, ids)
    assert seen.unique_ids == len(ids)
    assert seen.ids_match_db
    assert 1 <= seen.copies <= at_kill[State.SENDING]  # only mail the server took before the kill
    recovered = OutreachEvent.objects.filter(
        outreach_id__in=ids, from_state=State.SENDING, to_state=State.APPROVED
    ).count()
    figures.update(
        outreach=len(ids),
        lost=0,
        sending_at_kill=at_kill[State.SENDING],
        held_by_server_at_kill=held_by_server,
        received=seen.received,
        unique_message_ids=seen.unique_ids,
        copies=seen.copies,
        recovered_from_sending=recovered,
    )


def test_send_worker_killed_twice_on_one_email_stops_at_two_copies_as_possibly_sent(
    make_stack: StackFactory, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given one outreach and a mail server that stores each message, then waits 3 s to say 250
    ids = _autonomous_outreach(1)
    smtp_sink.data_delay_s = 3.0
    stack = make_stack()
    start_pipeline(stack)
    # when its send worker is SIGKILLed while the server holds the message, twice: the first
    # try and the one resend recovery makes (DISPATCH_STUCK_AFTER_S=4)
    for kill, name in enumerate(("worker-send", "worker-send-2"), start=1):
        wait_until(
            functools.partial(lambda n: len(smtp_sink.messages) >= n, kill),
            timeout_s=30,
            what=f"copy {kill} at the server",
            group=stack,
        )
        stack.kill(name, signal.SIGKILL)
        stack.procs.pop(name).wait(10)
        stack.start(
            f"worker-send-{kill + 1}", celery_worker(Queue.SEND, concurrency=2, name=f"send{kill + 1}")
        )
    smtp_sink.data_delay_s = 0.0
    # then it is a "possibly sent" dead letter, not a loop: two copies, one Message-ID
    wait_until(all_in(ids, State.DEAD), timeout_s=30, what="the outreach DEAD", group=stack)
    # and stays so: five more cycles, each with its recovery sweep, span the stuck timeout (4 s)
    # in which a third try would have been taken back and sent
    cycles_at_death = dispatch_cycles(stack)
    wait_until(
        lambda: dispatch_cycles(stack) >= cycles_at_death + 5, timeout_s=30, what="5 more cycles", group=stack
    )
    letter = DeadLetter.objects.get(outreach_id=ids[0])
    assert letter.failure_class == ErrorClass.POSSIBLY_SENT
    seen = delivery(smtp_sink, ids)
    assert (seen.received, seen.unique_ids, seen.ids_match_db) == (2, 1, True)
    assert states(ids)[State.DEAD] == 1
    figures.update(outreach=1, kills=2, received=seen.received, copies=seen.copies, state="dead")


def test_generation_worker_killed_mid_call_sends_each_of_several_outreach_once(
    make_stack: StackFactory, stub: TimedLLMStub, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given several outreach and a provider slow enough that the kill lands mid-call
    count = pick(4, 24)
    ids = _autonomous_outreach(count)
    stub.default = StubResponse(delay_s=0.8)
    stack = make_stack(DISPATCH_MAX_IN_FLIGHT="2")  # two at a time, so most wait in QUEUED
    start_pipeline(stack)
    wait_until(
        lambda: states(ids)[State.GENERATING] >= 1 and len(stub.requests) >= 1,
        timeout_s=30,
        what="generation to start",
        group=stack,
    )
    # when the generation worker is SIGKILLed mid-call, then replaced
    stack.kill("worker-generation", signal.SIGKILL)
    stack.procs.pop("worker-generation").wait(10)
    in_flight = states(ids)[State.GENERATING] + states(ids)[State.DISPATCHED]
    stack.start("worker-generation-2", celery_worker(Queue.GENERATION, concurrency=2, name="generation2"))
    # then every outreach is sent exactly once: nothing lost, no copy at the server
    wait_until(all_in(ids, State.SENT), timeout_s=pick(40, 90), what="every outreach SENT", group=stack)
    smtp_sink.wait_for(count)
    seen = delivery(smtp_sink, ids)
    assert seen.received == seen.unique_ids == count
    assert seen.copies == 0
    assert set(sent_events(ids).values()) == {1}
    stuck = OutreachEvent.objects.filter(outreach_id__in=ids, error_class="stuck").count()
    assert stuck >= 1
    figures.update(
        outreach=count,
        lost=0,
        in_flight_at_kill=in_flight,
        recovered_stuck=stuck,
        received=seen.received,
        copies=seen.copies,
        llm_requests=len(stub.requests),
        llm_requests_min=3 * count,
    )


def test_generation_worker_killed_with_many_jobs_in_flight_requeues_them_within_a_minute(
    make_stack: StackFactory, stub: TimedLLMStub, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given many outreach in flight at once on one threads-pool generation worker, a provider
    # slow enough that every job is mid-call at the kill, and the production timings: stuck
    # work waits 600 s, a job lease lives 30 s
    count = pick(16, 48)
    ids = _autonomous_outreach(count)
    stub.default = StubResponse(delay_s=30.0)
    stack = make_stack(
        DISPATCH_MAX_IN_FLIGHT=str(count),
        DISPATCH_STUCK_AFTER_S="600",
        GENERATION_LEASE_TTL_S="30",
        LLM_RPM="6000",
        LLM_TPM="10000000",
    )
    for queue in Queue:  # the pipeline, with a generation worker running a job per outreach
        stack.start(
            f"worker-{queue.value}",
            celery_worker(queue, concurrency=count if queue == Queue.GENERATION else 2),
        )
    stack.start("beat", celery_beat())
    wait_until(
        lambda: states(ids)[State.GENERATING] == count and len(stub.requests) >= count,
        timeout_s=60,
        what="every outreach mid-call",
        group=stack,
    )
    # when the worker is SIGKILLed with all of them in flight
    stack.kill("worker-generation", signal.SIGKILL)
    stack.procs.pop("worker-generation").wait(10)
    killed_at = time.time()
    # then every stranded job is back in the queue within a minute, by its lost lease
    wait_until(lambda: _requeued(ids) == count, timeout_s=90, what="every job requeued", group=stack)
    requeued_after_s = max(_requeued_at(ids)) - killed_at
    assert requeued_after_s < 60
    # and once a new worker runs, every outreach is sent exactly once
    stub.default = StubResponse(delay_s=0.1)
    stack.start("worker-generation-2", celery_worker(Queue.GENERATION, concurrency=count, name="generation2"))
    wait_until(all_in(ids, State.SENT), timeout_s=pick(90, 180), what="every outreach SENT", group=stack)
    smtp_sink.wait_for(count)
    seen = delivery(smtp_sink, ids)
    assert seen.received == seen.unique_ids == count
    assert seen.copies == 0
    assert set(sent_events(ids).values()) == {1}
    figures.update(
        outreach=count,
        lost=0,
        in_flight_at_kill=count,
        requeued_after_s=round(requeued_after_s, 1),
        received=seen.received,
        copies=seen.copies,
        llm_requests=len(stub.requests),
    )


def _lease_events(ids: list[int]) -> list[OutreachEvent]:
    return list(
        OutreachEvent.objects.filter(
            outreach_id__in=ids,
            from_state=State.GENERATING,
            to_state=State.QUEUED,
            note__contains="job lease gone",
        )
    )


def _requeued(ids: list[int]) -> int:
    return len({event.outreach_id for event in _lease_events(ids)})


def _requeued_at(ids: list[int]) -> list[float]:
    return [event.at.timestamp() for event in _lease_events(ids)]
