"""A job's successful calls are recorded on the breakers when the job settles, one round trip
for all of them (orchestrator.work): so a success may reach Redis after a fault that came
later, and must not clear it; a fault before it is cleared as before (real Redis)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from config.deployments import Deployment
from orchestrator import work
from orchestrator.budget import Budget, CallSlot
from orchestrator.deployments.breaker import healths
from orchestrator.dispatch.reads import organization_caps_load
from orchestrator.work import JobBudget, Usage

pytestmark = pytest.mark.django_db  # the organizations' caps are loaded with the deployments' limits

# Between a call's answer and a fault in another job: the success says how long ago it
# answered, measured before its round trip, so its moment is known to within that round trip.
LATER_S = 0.1

SMALL = Deployment(name="small", model="m-small", rpm=6000, tpm=6_000_000)


@pytest.fixture
def one_deployment(settings: Any, budget: Budget) -> Deployment:
    settings.LLM_DEPLOYMENTS = (SMALL,)
    settings.LLM_FALLBACKS = {}
    settings.LLM_FAULT_THRESHOLD = 2
    organization_caps_load(budget=budget)  # the deployment's limits, as the cycle loads them
    return SMALL


def _answered(budget: Budget, usage: JobBudget) -> None:
    work.call_done(
        budget=budget,
        usage=usage,
        deployment=SMALL,
        step="plan",
        slot=CallSlot(wait_ms=0),
        seconds=0.4,
        remaining_requests=None,
        remaining_tokens=None,
        reset_requests_s=None,
        reset_tokens_s=None,
        processing_ms=None,
        tokens=100,
        input_tokens=60,
        output_tokens=40,
    )


def _refused(times: int) -> None:
    for _ in range(times):
        work.deployment_fault(deployment=SMALL, status=404, code="model_not_found")


def _job() -> JobBudget:
    return JobBudget(route={"plan": SMALL}, uses={SMALL.label: Usage()})


def test_a_success_recorded_after_a_later_fault_leaves_that_fault_standing(
    budget: Budget, redis_client: Any, one_deployment: Deployment
) -> None:
    # given a job whose call answered, and another job's call refused after it (its first fault;
    # later by more than a round trip to Redis, the success's moment being known to that)
    job = _job()
    _answered(budget, job)
    time.sleep(LATER_S)
    _refused(1)
    # when the first job settles (its success reaches Redis now)
    work.job_settle(budget=budget, usage=job)
    # then the later fault still counts: one more opens the breaker
    assert healths(client=redis_client, deployments=[SMALL])[SMALL.label].faults == 1
    _refused(1)
    assert healths(client=redis_client, deployments=[SMALL])[SMALL.label].state == "open"


def test_a_success_clears_the_faults_before_it_when_its_job_settles(
    budget: Budget, redis_client: Any, one_deployment: Deployment
) -> None:
    # given an open breaker, and a probe job whose call then answered
    _refused(2)
    assert healths(client=redis_client, deployments=[SMALL])[SMALL.label].state == "open"
    time.sleep(LATER_S)
    job = _job()
    _answered(budget, job)
    # when the job settles, then the breaker is closed and its faults start again from 0
    work.job_settle(budget=budget, usage=job)
    health = healths(client=redis_client, deployments=[SMALL])[SMALL.label]
    assert (health.state, health.faults) == ("closed", 0)


def test_each_answered_calls_latency_is_sampled_once_when_its_job_settles(
    budget: Budget, redis_client: Any, one_deployment: Deployment
) -> None:
    # given a job with two answered calls
    job = _job()
    _answered(budget, job)
    _answered(budget, job)
    # when it settles (twice, as a job that is put back settles what it made and stops)
    work.job_settle(budget=budget, usage=job)
    work.job_settle(budget=budget, usage=job)
    # then the step's latency window holds both calls, once each
    assert redis_client.lrange("orchestrator:llm_latency:plan", 0, -1) == [b"400", b"400"]
