from __future__ import annotations

import signal
from collections import Counter

import pytest

from config.queues import Queue
from devtools.llm_stub import LLMStub, StubResponse
from devtools.processes import ProcessGroup, celery_worker
from devtools.smtp_sink import SMTPSink
from nurture.review import draft_approve
from outreach.models import Outreach, OutreachEvent, State
from tests.e2e.conftest import start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner, make_reviewer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _states(*ids: int) -> Counter[str]:
    return Counter(Outreach.objects.filter(pk__in=ids).values_list("state", flat=True))


def test_beat_dispatches_autonomous_and_approved_work_through_real_workers(
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given an AI agent (autonomous) and a seller (review required), 4 intros each
    org = make_org()
    agent, seller = make_owner(organization=org), make_owner(organization=org, review_required=True)
    auto = [make_outreach(lead=make_lead(owner=agent)).pk for _ in range(4)]
    review = [make_outreach(lead=make_lead(owner=seller)).pk for _ in range(4)]
    # when beat, the orchestrator, generation and send workers run
    start_pipeline(stack)
    # then the agent's emails are sent and the seller's drafts wait for approval
    wait_until(lambda: _states(*auto)[State.SENT] == 4, timeout_s=60, what="4 autonomous emails", group=stack)
    wait_until(
        lambda: _states(*review)[State.AWAITING_APPROVAL] == 4, timeout_s=30, what="4 drafts", group=stack
    )
    assert len(llm_stub.requests) == 8 * 3
    # when a person approves the drafts
    reviewer = make_reviewer("reviewer")
    for outreach in Outreach.objects.filter(pk__in=review):
        draft_approve(outreach=outreach, by=reviewer)
    # then the next cycles send them, with no further LLM call, one email each
    wait_until(lambda: _states(*review)[State.SENT] == 4, timeout_s=30, what="4 approved emails", group=stack)
    assert len(llm_stub.requests) == 8 * 3
    smtp_sink.wait_for(8)
    ids = [m.message["Message-ID"] for m in smtp_sink.messages]
    assert len(ids) == len(set(ids)) == 8


def test_generation_worker_killed_mid_call_is_recovered_and_sent_once(
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given a provider slow enough that the worker is mid-call when it dies
    llm_stub.default = StubResponse(delay_s=3.0)
    outreach = make_outreach()
    start_pipeline(stack)
    wait_until(
        lambda: _states(outreach.pk)[State.GENERATING] == 1,
        timeout_s=30,
        what="generation to start",
        group=stack,
    )
    # when the generation worker (main process and pool) is SIGKILLed mid-call
    stack.kill("worker-generation", signal.SIGKILL)
    stack.procs.pop("worker-generation").wait(10)
    llm_stub.default = StubResponse()
    stack.start("worker-generation-2", celery_worker(Queue.GENERATION, concurrency=2, name="generation2"))
    # then the stuck outreach is recovered, generated again and sent exactly once
    wait_until(
        lambda: _states(outreach.pk)[State.SENT] == 1, timeout_s=60, what="the recovered email", group=stack
    )
    # recovered at least once (with a 4 s stuck timeout, a re-dispatched row can be recovered
    # again while the replacement worker still boots), and whatever the count, one email
    assert OutreachEvent.objects.filter(outreach_id=outreach.pk, error_class="stuck").count() >= 1
    smtp_sink.wait_for(1)
    assert len(smtp_sink.messages) == 1
