"""How much LLM work the dispatcher keeps in flight: Little's law on observed latency.

    target = ceil(allowed rate x job latency x (1 + headroom)), at most DISPATCH_MAX_IN_FLIGHT

- allowed rate (outreach/s): what the budget admits, the tighter of its request refill rate /
  calls per outreach and its token refill rate / estimated tokens per outreach (the adapted
  rates, so a provider that cut us down shrinks the target with it);
- job latency (s): the sum over the three steps (plan, context, message) of each step's p95
  over its last WINDOW_CALLS calls, plus one dispatch interval (a finished job's slot is only
  refilled by the next cycle; publish and worker pick-up are well inside it). A step with fewer
  than MIN_OBSERVATIONS calls counts DISPATCH_COLD_CALL_LATENCY_S (a cold start).
- headroom: DISPATCH_IN_FLIGHT_HEADROOM, a fraction for the Poisson spread of in-flight counts.

Why p95 and not p50: Little's law holds for the mean (L = rate x mean time in system), and a
lognormal provider's mean sits above its median (median 3 s, sigma 0.5: mean 3.4 s), so a
p50-sized cap holds in-flight below rate x mean and the key idles in proportion. The p95 is
above the mean for any lognormal with sigma < 3.3. Over-sizing costs nothing in steady state:
the budget, not this cap, sets the dispatch rate, so in flight settles at rate x mean time
whatever the cap; the cap only binds when work stops finishing, which is what it is for.

Durations are recorded by the generation worker around the provider call only (not the pacing
wait, not broker queueing): a saturated worker pool or a full provider window must not raise
the target and dispatch more into the backlog. This module owns the keys.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import redis
from django.conf import settings
from redis.client import Pipeline

from config import redis_client
from orchestrator.budget import Headroom
from orchestrator.figures import Quantiles, quantiles_of

log = logging.getLogger(__name__)

STEPS: Final = ("triage", "plan", "context", "message")  # observed (triage: replies only)
# A job's steps for its latency: the writing ones (intros and nudges, most jobs, make no triage call).
JOB_STEPS: Final = ("plan", "context", "message")
KEY_PREFIX: Final = "orchestrator:llm_latency:"  # + step: a list of the newest durations (ms)
WINDOW_CALLS: Final = 200  # per step: a few seconds at 3,000 RPM, a few minutes at 300 RPM
MIN_OBSERVATIONS: Final = 5  # fewer calls than this: the cold-start latency stands in
KEY_TTL_S: Final = 3_600  # an hour without calls: the history is stale, start cold again
QUANTILE: Final = "p95"


@dataclass(frozen=True, slots=True)
class Sizing:
    """One cycle's in-flight sizing, for the cycle and for every dashboard."""

    target: int  # in-flight target after the cap
    uncapped: int  # what Little's law asked for
    cap: int  # DISPATCH_MAX_IN_FLIGHT
    rate_per_s: float  # outreach/s the budget admits
    job_latency_s: float  # sum of the steps' latency plus the dispatch overhead
    steps: Mapping[str, Quantiles]  # observed p50/p95 per step (count 0: none yet)


def in_flight_target(*, rate_per_s: float, job_latency_s: float, headroom: float, cap: int) -> int:
    """Little's law, L = rate x time in system, with headroom on top; never 0 (a blocked
    budget grants nothing anyway) and never above `cap`."""
    wanted = rate_per_s * job_latency_s * (1 + headroom)
    return max(1, min(cap, _ceil(wanted)))


def job_latency(
    *,
    steps: Mapping[str, Quantiles],
    cold_call_s: float,
    overhead_s: float,
    steps_per_job: tuple[str, ...] = JOB_STEPS,
) -> float:
    """Seconds one outreach holds its slot: each step's p95 (the cold default while a step has
    too few observations) plus the dispatch overhead."""
    return overhead_s + sum(_step_latency(steps.get(step), cold_call_s=cold_call_s) for step in steps_per_job)


def allowed_rate(*, headroom: Headroom, requests_each: int, tokens_each: int) -> float:
    """Outreach per second the budget refills, whichever of requests and tokens binds."""
    by_requests = headroom.requests_per_min / requests_each if requests_each else math.inf
    by_tokens = headroom.tokens_per_min / tokens_each if tokens_each else math.inf
    return min(by_requests, by_tokens) / 60


def outreach_cost() -> tuple[int, int]:
    """What one outreach reserves: (requests, estimated tokens)."""
    calls = settings.LLM_CALLS_PER_OUTREACH
    return calls, calls * settings.LLM_EST_TOKENS_PER_CALL


def in_flight_sizing(
    *, headroom: Headroom | None, requests_each: int, tokens_each: int, rate_per_s: float | None = None
) -> Sizing:
    """The target for now, from the budget's rates (or `rate_per_s`, what the scarcest pool of
    deployments admits: dispatch.routing), the observed latencies and settings."""
    steps = latency_observed()
    if rate_per_s is None:
        assert headroom is not None
        rate_per_s = allowed_rate(headroom=headroom, requests_each=requests_each, tokens_each=tokens_each)
    rate = rate_per_s
    latency = job_latency(
        steps=steps, cold_call_s=settings.DISPATCH_COLD_CALL_LATENCY_S, overhead_s=settings.DISPATCH_INTERVAL
    )
    cap = settings.DISPATCH_MAX_IN_FLIGHT
    uncapped = in_flight_target(
        rate_per_s=rate, job_latency_s=latency, headroom=settings.DISPATCH_IN_FLIGHT_HEADROOM, cap=1 << 30
    )
    return Sizing(
        target=min(cap, uncapped),
        uncapped=uncapped,
        cap=cap,
        rate_per_s=rate,
        job_latency_s=latency,
        steps=steps,
    )


def call_latency_record(*, step: str, seconds: float) -> None:
    """Remember one provider call's duration (the generation worker stages its calls' with the
    job's settlement: orchestrator.work). Never fails: without the sample the dispatcher sizes
    on the older ones."""
    pipe = redis_client.shared().pipeline(transaction=False)
    call_latency_stage(pipe, step=step, seconds=seconds)
    try:
        pipe.execute()
    except redis.RedisError as exc:
        log.warning("LLM latency not recorded", extra={"step": step, "error": str(exc)})


def call_latency_stage(pipe: Pipeline, *, step: str, seconds: float) -> None:
    """call_latency_record's commands, staged on `pipe` (a pipeline on REDIS_URL) to go with
    others in one round trip."""
    key = KEY_PREFIX + step
    pipe.lpush(key, round(seconds * 1000))
    pipe.ltrim(key, 0, WINDOW_CALLS - 1)
    pipe.expire(key, KEY_TTL_S)


def latency_observed() -> dict[str, Quantiles]:
    """p50/p95 (seconds) of each step's last WINDOW_CALLS calls; empty Quantiles when Redis is
    unreachable (the cold default then sizes the cycle)."""
    try:
        pipe = redis_client.shared().pipeline(transaction=False)
        for step in STEPS:
            pipe.lrange(KEY_PREFIX + step, 0, WINDOW_CALLS - 1)
        found = pipe.execute()
    except redis.RedisError as exc:
        log.warning("LLM latency unreadable", extra={"error": str(exc)})
        found = [[] for _ in STEPS]
    return {step: quantiles_of(int(ms) / 1000 for ms in raw) for step, raw in zip(STEPS, found, strict=True)}


def _step_latency(q: Quantiles | None, *, cold_call_s: float) -> float:
    if q is None or q.count < MIN_OBSERVATIONS or q.p95_s is None:
        return cold_call_s
    return q.p95_s


def _ceil(value: float) -> int:
    """Ceiling after rounding away float noise: 10 outreach/s x 0.3 s x 1.0 is 3.0000000000000004
    in floats, and must ask for 3 slots, not 4."""
    return math.ceil(round(value, 6))
