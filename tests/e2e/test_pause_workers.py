"""A pause with real workers: jobs already in the broker when an owner is paused are put back
by the workers (nothing is left DISPATCHED, nothing is generated or sent), and resuming sends
them (orchestrator.controls.pauses.job_pause; docs/operators.md, "Pause and resume")."""

from __future__ import annotations

from collections import Counter

import pytest

from config.queues import Queue
from devtools.llm_stub import LLMStub
from devtools.processes import ProcessGroup, celery_beat, celery_worker
from devtools.smtp_sink import SMTPSink
from orchestrator.controls import pauses
from outreach.models import Outreach, State
from tests.e2e.conftest import dispatch_cycles, wait_until
from tests.factories import make_draft, make_lead, make_org, make_outreach, make_owner, make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _states(ids: list[int]) -> Counter[str]:
    return Counter(Outreach.objects.filter(pk__in=ids).values_list("state", flat=True))


def test_pausing_while_jobs_sit_in_the_broker_leaves_none_dispatched_and_resuming_sends_them(
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given an autonomous owner with 3 intros to write and 2 approved drafts to send, and only
    # the dispatcher running: its jobs wait in the generation and send queues, unconsumed
    owner = make_owner(organization=make_org(), name="Ann")
    intros = [make_outreach(lead=make_lead(owner=owner)).pk for _ in range(3)]
    approved = [make_draft(lead=make_lead(owner=owner), state=State.APPROVED).pk for _ in range(2)]
    everything = intros + approved
    stack.env["DISPATCH_STUCK_AFTER_S"] = "600"  # no recovery sweep: the jobs stay in the broker
    stack.start("worker-orchestrator", celery_worker(Queue.ORCHESTRATOR, concurrency=1))
    stack.start("beat", celery_beat())
    wait_until(
        lambda: _states(everything)[State.DISPATCHED] == 5,
        timeout_s=45,
        what="5 jobs in the broker",
        group=stack,
    )
    # when an operator pauses the owner, then the generation and send workers start
    pauses.pause(owner=owner, by=make_user("alice"), reason="checking the copy")
    stack.start("worker-generation", celery_worker(Queue.GENERATION, concurrency=2))
    stack.start("worker-send", celery_worker(Queue.SEND, concurrency=2))
    # then the workers put every job back (intros QUEUED, drafts APPROVED), none left DISPATCHED
    wait_until(
        lambda: _states(intros)[State.QUEUED] == 3 and _states(approved)[State.APPROVED] == 2,
        timeout_s=45,
        what="the paused jobs put back",
        group=stack,
    )
    # and the pause holds: three more dispatch cycles claim none of them
    cycles_at_put_back = dispatch_cycles(stack)
    wait_until(
        lambda: dispatch_cycles(stack) >= cycles_at_put_back + 3,
        timeout_s=30,
        what="3 more dispatch cycles",
        group=stack,
    )
    assert _states(everything) == Counter({State.QUEUED: 3, State.APPROVED: 2})
    assert llm_stub.requests == []
    assert smtp_sink.messages == []
    reasons = set(Outreach.objects.filter(pk__in=everything).values_list("blocked_reason", flat=True))
    assert all(r.startswith("paused by alice at ") and r.endswith("checking the copy") for r in reasons)
    # when the operator resumes
    pauses.resume(pauses=pauses.active(), by=make_user("bob"))
    # then the next cycles send all five, once each
    wait_until(lambda: _states(everything)[State.SENT] == 5, timeout_s=60, what="5 emails sent", group=stack)
    smtp_sink.wait_for(5)
    assert len(smtp_sink.messages) == 5
