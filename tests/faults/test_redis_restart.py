"""Redis (broker, budget, dispatch lease) crashes mid-run and comes back empty.

The stack runs on a redis-server of this test (never the shared one). SIGKILL with no
persistence loses every queued task message and every budget key: PostgreSQL is the record,
so stuck recovery must bring back whatever was in flight, and the dispatcher must resume.
Under BUDGET_FAILURE_POLICY=closed no LLM call may start while Redis is away; under `open`
work in flight may go on unmetered.
"""

from __future__ import annotations

import shutil
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from devtools.llm_stub import StubResponse
from devtools.processes import RedisServer
from devtools.smtp_sink import SMTPSink
from outreach.models import Outreach, State
from tests.e2e.conftest import start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.faults.conftest import StackFactory
from tests.faults.helpers import (
    TimedLLMStub,
    all_in,
    delivery,
    first_sent_after,
    last_sent,
    pick,
    sent_events,
    states,
)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server on PATH"),
]

# Calls that passed the budget just before the crash still reach the provider a moment later.
IN_TRANSIT_S = 0.5


def _just_started(ids: list[int]) -> bool:
    recent = timezone.now() - timedelta(seconds=0.3)
    return Outreach.objects.filter(pk__in=ids, state=State.GENERATING, state_changed_at__gte=recent).exists()


@pytest.mark.parametrize("policy", ["open", "closed"])
def test_redis_crash_mid_run_loses_nothing_and_the_budget_follows_its_policy(
    policy: str,
    own_redis: RedisServer,  # before make_stack: torn down after the processes that use it
    make_stack: StackFactory,
    stub: TimedLLMStub,
    smtp_sink: SMTPSink,
    figures: dict[str, object],
) -> None:
    # given a run in progress on our own Redis: two outreach in flight at a time, the rest queued
    agent = make_owner(organization=make_org(), daily_limit=10_000)
    ids = [make_outreach(lead=make_lead(owner=agent)).pk for _ in range(pick(8, 40))]
    stub.default = StubResponse(delay_s=1.0)  # a job just started still has calls 1 s+ after the crash
    stack = make_stack(redis_url=own_redis.url, BUDGET_FAILURE_POLICY=policy, DISPATCH_MAX_IN_FLIGHT="2")
    start_pipeline(stack)
    wait_until(lambda: states(ids)[State.SENT] >= 2, timeout_s=30, what="2 outreach SENT", group=stack)
    # a job that has just started has calls still to make when Redis goes
    wait_until(lambda: _just_started(ids), timeout_s=15, what="a generation just started", group=stack)
    # when Redis crashes (everything in it lost), stays away, and comes back empty
    at_crash = states(ids)
    down_at = time.time()
    own_redis.crash()
    time.sleep(pick(4.0, 15.0))
    own_redis.start()
    up_at = time.time()
    # then every outreach ends SENT exactly once: nothing lost, no copy at the server
    wait_until(all_in(ids, State.SENT), timeout_s=pick(60, 120), what="every outreach SENT", group=stack)
    assert set(sent_events(ids).values()) == {1}
    seen = delivery(smtp_sink, ids)
    assert seen.unique_ids == seen.received == len(ids)
    # and the dispatcher resumed: work that was still queued at the crash went out afterwards
    assert at_crash[State.QUEUED] >= 1
    recovery_s = first_sent_after(ids, up_at)
    assert recovery_s is not None
    # and the budget followed its policy while Redis was away
    during = stub.arrivals_between(down_at + IN_TRANSIT_S, up_at)
    if policy == "closed":
        assert during == 0, f"{during} LLM calls started while Redis was down under the closed policy"
    else:
        assert during >= 1, "the open policy should let work in flight go on, unmetered"
    figures.update(
        policy=policy,
        outreach=len(ids),
        lost=0,
        copies=seen.copies,
        outage_s=round(up_at - down_at, 1),
        in_flight_at_crash=at_crash[State.GENERATING] + at_crash[State.DISPATCHED] + at_crash[State.SENDING],
        queued_at_crash=at_crash[State.QUEUED],
        llm_calls_during_outage=during,
        recovery_s=recovery_s,
        all_sent_s=round(last_sent(ids) - up_at, 1),
    )
