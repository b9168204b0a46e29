"""The provider answers 429 to everything for a while (20 s in CI, 60 s under CHAOS=1), then recovers.

What must not happen is a retry storm: every worker hammering the provider as fast as it can.
A call's first 429 is waited off in the worker (through the budget, which holds every call for
Retry-After), a second re-queues its job with not_before = Retry-After, and the budget holds
every dispatch for Retry-After too and halves its rate (AIMD). So
during the outage the provider sees about one probe per Retry-After per busy worker, not
hundreds; no job burns an attempt on a 429; and once the provider answers again, sending
resumes within a few seconds. Full speed takes longer: each 429 (at most one per 5 s) halved the
budget's rate, which then regains 2% of the configured limit per quiet 5 s; the test reports
the rate at recovery and how long the budget needs to reach the configured limit again.
"""

from __future__ import annotations

import math
import time

import pytest

from devtools.llm_stub import StubResponse
from devtools.smtp_sink import SMTPSink
from orchestrator.budget import Adaptive, budget_from_settings
from orchestrator.models import DeadLetter
from outreach.models import State
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
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

OUTAGE_S = pick(20.0, 60.0)
RETRY_AFTER_S = 2
GENERATION_WORKERS = 2  # start_pipeline's generation concurrency


def test_a_provider_answering_429_for_a_while_sees_no_retry_storm_and_throughput_recovers(
    make_stack: StackFactory, stub: TimedLLMStub, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given queued outreach and a provider that refuses every call with 429, Retry-After 2 s
    agent = make_owner(organization=make_org(), daily_limit=10_000)
    ids = [make_outreach(lead=make_lead(owner=agent)).pk for _ in range(pick(4, 30))]
    stub.default = StubResponse(status=429, text="rate limited", headers={"retry-after": str(RETRY_AFTER_S)})
    stack = make_stack()
    # when the pipeline runs through the outage, and the provider then recovers
    start_pipeline(stack)
    wait_until(lambda: len(stub.requests) >= 1, timeout_s=30, what="the first provider call", group=stack)
    outage_from = stub.arrivals[0]
    time.sleep(max(0.0, outage_from + OUTAGE_S - time.time()))
    stub.default = StubResponse()
    recovered_at = time.time()
    budget = budget_from_settings()  # the stack's budget: same Redis, same LLM_RPM
    limit_at_recovery = int(budget.snapshot()["scopes"]["provider"]["limit_rpm"])
    wait_until(all_in(ids, State.SENT), timeout_s=pick(40, 240), what="every outreach SENT", group=stack)
    # then the provider saw a handful of calls during the outage, bounded by the Retry-After hold
    during = stub.arrivals_between(outage_from, recovered_at)
    probes_bound = (math.ceil(OUTAGE_S / RETRY_AFTER_S) + 1) * GENERATION_WORKERS
    assert during <= probes_bound, f"{during} calls in a {OUTAGE_S:.0f} s outage: a retry storm"
    # and no outreach lost an attempt to the 429s, every one was sent once, and sending resumed quickly
    assert DeadLetter.objects.filter(outreach_id__in=ids).count() == 0
    assert set(sent_events(ids).values()) == {1}
    seen = delivery(smtp_sink, ids)
    assert seen.received == seen.unique_ids == len(ids)
    recovery_s = first_sent_after(ids, recovered_at)
    assert recovery_s is not None
    assert recovery_s < 15
    adaptive, configured = Adaptive(), budget.limits.rpm
    regain_s = (
        math.ceil((configured - limit_at_recovery) / adaptive.step(configured)) * adaptive.interval_ms / 1000
    )
    figures.update(
        outreach=len(ids),
        llm_rpm=configured,
        limit_rpm_at_recovery=limit_at_recovery,
        full_rate_after_s=regain_s,
        outage_s=OUTAGE_S,
        retry_after_s=RETRY_AFTER_S,
        requests_during_outage=during,
        requests_bound=probes_bound,
        requests_per_min_during_outage=round(during * 60 / OUTAGE_S, 1),
        recovery_s=recovery_s,
        all_sent_s=round(last_sent(ids) - recovered_at, 1),
        lost=0,
        copies=seen.copies,
    )
