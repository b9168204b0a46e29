"""LLM work in flight now against the dispatcher's Little's-law target, and the observed
provider latency per step it is sized on (orchestrator.dispatch.inflight computes both)."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from orchestrator.budget import Budget, get_budget
from orchestrator.deployments.breaker import health_client
from orchestrator.dispatch.owner_tokens import job_costs_load
from orchestrator.dispatch.reads import active_owner_ids, llm_in_flight, organization_caps_load
from orchestrator.figures import Quantiles


@dataclass(frozen=True)
class InFlightNow:
    in_flight: int  # outreach holding an LLM reservation (dispatched or generating)
    target: int  # the dispatcher's in-flight target now (after the cap)
    uncapped: int  # what Little's law asks for before DISPATCH_MAX_IN_FLIGHT
    cap: int
    rate_per_s: float  # outreach/s the budget admits
    job_latency_s: float  # the latency the target is sized on (steps' p95 + one interval)
    latency: dict[str, Quantiles]  # observed provider latency per step (seconds)


def in_flight_now(*, budget: Budget | None = None) -> InFlightNow:
    # Imported here: dispatch.inflight takes its percentiles from this package (metrics.sql), so
    # importing it while this package initialises would be circular.
    from orchestrator.dispatch.deployment_plan import deployments_rate, per_call_tokens
    from orchestrator.dispatch.inflight import in_flight_sizing, outreach_cost

    budget = budget or get_budget()
    requests, tokens = outreach_cost()
    organization_caps_load(budget=budget)  # the deployments' scopes
    # Each call at the active owners' cheapest learned job, as the dispatcher counts it.
    costs = job_costs_load(owner_ids=active_owner_ids(), default=tokens)
    per_call = per_call_tokens(budget=budget, job_tokens=costs.smallest_counted())
    try:  # what the deployments' scarcest pool admits, as the dispatcher sizes on it
        rate: float | None = deployments_rate(budget=budget, client=health_client(), per_call=per_call)
    except redis.RedisError:
        rate = None
    sizing = in_flight_sizing(
        headroom=budget.headroom(), requests_each=requests, tokens_each=tokens, rate_per_s=rate
    )
    return InFlightNow(
        in_flight=llm_in_flight(),
        target=sizing.target,
        uncapped=sizing.uncapped,
        cap=sizing.cap,
        rate_per_s=sizing.rate_per_s,
        job_latency_s=sizing.job_latency_s,
        latency=dict(sizing.steps),
    )
