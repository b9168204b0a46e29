"""The dispatch cycle's view of the LLM deployments: what each can take now, which are failing,
which pools fall back, and why work waits when none can take it. The I/O shell around
orchestrator.deployments.placement.

Per cycle: one round trip for every deployment's headroom (each its own budget scope) and one
for all breakers. A pool (deployment name) may fall back when all its deployments' breakers are open
(misconfigured), or when it has had no room at all for LLM_FALLBACK_AFTER_S (a provider that
holds it with Retry-After, or limits adapted down to nothing); at the limit a pool's room comes
back every cycle, so running at the limit is not starving.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from django.conf import settings

from config.deployments import Deployment, deployments, step_models
from config.redis_client import Client
from orchestrator.budget import Budget, Headroom
from orchestrator.deployments.breaker import Health, healths, probe_mark
from orchestrator.deployments.placement import Placement, Room, calls_per_pool, place
from orchestrator.dispatch.inflight import allowed_rate

STARVED_KEY = "orchestrator:dispatch:starved"  # pool -> ms (wall clock) since it last had room


@dataclass(frozen=True)
class Routing:
    placement: Placement
    rate_per_s: float  # jobs/s the scarcest pool admits (the in-flight sizing's rate)
    blocked_reason: str  # why nothing can be placed, when a fault is the cause ("" otherwise)
    half_open: frozenset[str]  # labels due for a probe: the first job placed there is it
    health: Mapping[str, Health]
    headroom: Mapping[str, Headroom]


def routing_plan(*, budget: Budget, client: Client, count: int, per_call: int | None = None) -> Routing:
    """Where up to `count` jobs would run now, from each deployment's room and breaker, each
    call counted `per_call` tokens (the dispatcher's learned figure, owner_tokens; by default
    LLM_EST_TOKENS_PER_CALL)."""
    per_call = per_call or settings.LLM_EST_TOKENS_PER_CALL
    deps = deployments()
    steps = step_models()
    calls = calls_per_pool(steps)
    health = healths(client=client, deployments=deps)
    headroom = _rooms(budget=budget, deps=deps)
    rooms = [
        _room(d, headroom[d.label], health[d.label], calls=calls.get(d.name, 0), per_call=per_call)
        for d in deps
    ]
    faulted = {
        name for name in calls if all(health[d.label].state != "closed" for d in deps if d.name == name)
    }
    starved = _starved(client=client, pools=calls, rooms=rooms, faulted=faulted, per_call=per_call)
    fallbacks: dict[str, str] = settings.LLM_FALLBACKS
    placement = place(
        count=count,
        step_pools=steps,
        rooms=rooms,
        fallbacks=fallbacks,
        may_fall_back=frozenset(faulted | starved),
        tokens_per_call=per_call,
    )
    blocked = ""
    if not placement.routes and placement.stopped_at in faulted:
        blocked = next(health[d.label].reason for d in deps if d.name == placement.stopped_at)
    return Routing(
        placement=placement,
        rate_per_s=_rate(
            deps=deps, calls=calls, headroom=headroom, health=health, fallbacks=fallbacks, per_call=per_call
        ),
        blocked_reason=blocked,
        half_open=frozenset(label for label, h in health.items() if h.state == "half_open"),
        health=health,
        headroom=headroom,
    )


def deployments_rate(*, budget: Budget, client: Client, per_call: int | None = None) -> float:
    """Jobs/s the scarcest pool admits now (the dispatcher's in-flight sizing), each call
    `per_call` tokens (`per_call_tokens`; None: the configured estimate), read only: for
    dashboards."""
    deps = deployments()
    health = healths(client=client, deployments=deps)
    headroom = _rooms(budget=budget, deps=deps)
    calls = calls_per_pool(step_models())
    return _rate(
        deps=deps,
        calls=calls,
        headroom=headroom,
        health=health,
        fallbacks=settings.LLM_FALLBACKS,
        per_call=per_call or settings.LLM_EST_TOKENS_PER_CALL,
    )


def _rooms(*, budget: Budget, deps: Sequence[Deployment]) -> dict[str, Headroom]:
    """Each deployment's headroom by label, all read in one script call (`Budget.headrooms`)."""
    return dict(zip([d.label for d in deps], budget.headrooms([(d.scope,) for d in deps]), strict=True))


def per_call_tokens(*, budget: Budget, job_tokens: int) -> int | None:
    """Tokens a call is counted in the cycle's slot count: the job's share, a job at most what
    one reservation can hold (a larger one is reserved at that: reservation._Draws). None
    without owners (the configured estimate)."""
    if not job_tokens:
        return None
    most = min(budget.largest_tokens(scopes=(d.scope,)) for d in deployments())
    calls = settings.LLM_CALLS_PER_OUTREACH
    # Rounded up, but never past what one reservation holds: a job capped at `most` must still
    # fit a bucket of `most` (calls x ceil(most / calls) can pass it by a token or two).
    return max(1, min(math.ceil(job_tokens / calls), most // calls))


def probes_mark(*, client: Client, routing: Routing, labels_used: set[str]) -> None:
    """Half-open deployments that got a job this cycle: that job is the probe."""
    for deployment in deployments():
        if deployment.label in routing.half_open and deployment.label in labels_used:
            probe_mark(client=client, deployment=deployment)


def _room(deployment: Deployment, headroom: Headroom, health: Health, *, calls: int, per_call: int) -> Room:
    """Open or probing: nothing. Half open: one job's calls (the probe). Else the headroom."""
    requests = 0.0 if headroom.blocked_ms > 0 else headroom.requests
    tokens = headroom.tokens
    if health.state in ("open", "probing"):
        requests = 0.0
    elif health.state == "half_open":
        one_job = calls or settings.LLM_CALLS_PER_OUTREACH
        requests, tokens = min(requests, one_job), min(tokens, one_job * per_call)
    return Room(
        label=deployment.label,
        pool=deployment.name,
        requests=requests,
        tokens=tokens,
        probe=health.state == "half_open",
    )


def _starved(
    *, client: Client, pools: Mapping[str, int], rooms: Sequence[Room], faulted: set[str], per_call: int
) -> set[str]:
    """Pools with no room for one job since longer than LLM_FALLBACK_AFTER_S (dispatcher's clock:
    one dispatcher at a time holds the lease)."""
    now_ms = int(time.time() * 1000)
    since = {_text(k): int(v) for k, v in client.hgetall(STARVED_KEY).items()}
    empty: dict[str, int] = {}
    for pool, n in pools.items():
        fits = any(r.requests >= n and r.tokens >= n * per_call for r in rooms if r.pool == pool)
        if not fits and pool not in faulted:
            empty[pool] = since.get(pool, now_ms)
    pipe = client.pipeline()
    pipe.delete(STARVED_KEY)
    if empty:
        pipe.hset(STARVED_KEY, mapping={k: str(v) for k, v in empty.items()})
    pipe.execute()
    wait_ms = settings.LLM_FALLBACK_AFTER_S * 1000
    return {pool for pool, at in empty.items() if now_ms - at >= wait_ms}


def _rate(
    *,
    deps: Sequence[Deployment],
    calls: Mapping[str, int],
    headroom: Mapping[str, Headroom],
    health: Mapping[str, Health],
    fallbacks: Mapping[str, str],
    per_call: int,
) -> float:
    """Jobs/s the scarcest pool refills (its healthy deployments together; a pool with none
    counts its fallback's), for the in-flight sizing: each call `per_call` tokens."""

    def pool_rate(pool: str, n: int) -> float:
        return sum(
            allowed_rate(headroom=headroom[d.label], requests_each=n, tokens_each=n * per_call)
            for d in deps
            if d.name == pool and health[d.label].state == "closed"
        )

    rates = []
    for pool, n in calls.items():
        rate = pool_rate(pool, n)
        if rate == 0 and pool in fallbacks:
            rate = pool_rate(fallbacks[pool], n)
        rates.append(rate)
    return min(rates)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
