"""Each LLM deployment now: its limits, what its last 60 s window used, its headroom and its
breaker (orchestrator.deployments.breaker). One snapshot round trip for all scopes, one headroom
read per deployment and one for the breakers: O(deployments)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import redis

from config.deployments import deployments
from orchestrator.budget import Budget, get_budget
from orchestrator.deployments.breaker import health_client, healths
from orchestrator.dispatch.reads import organization_caps_load

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeploymentNow:
    label: str  # name#index
    model: str
    limit_rpm: int
    limit_tpm: int
    used_requests: int | None = None  # in the last 60 s (None: Redis unreachable)
    used_tokens: int | None = None
    headroom_requests: float | None = None  # what the dispatcher may reserve there now
    headroom_tokens: float | None = None
    breaker: str = "unknown"  # closed, open, half_open, probing
    reason: str = ""  # the fault that opened it


def deployments_now(*, budget: Budget | None = None) -> list[DeploymentNow]:
    budget = budget or get_budget()
    deps = deployments()
    organization_caps_load(budget=budget)  # the deployments' scopes, as the dispatcher sees them
    snap = budget.snapshot(scopes=tuple(d.scope for d in deps))
    try:
        breakers = healths(client=health_client(), deployments=deps)
    except redis.RedisError as exc:
        log.warning("LLM deployment breakers unreadable", extra={"error": str(exc)})
        breakers = {}
    rows = []
    for d in deps:
        scope = (snap.get("scopes") or {}).get(d.scope)
        room = budget.headroom(scopes=(d.scope,)) if scope else None
        health = breakers.get(d.label)
        rows.append(
            DeploymentNow(
                label=d.label,
                model=d.model,
                limit_rpm=d.rpm,
                limit_tpm=d.tpm,
                used_requests=int(scope["calls_in_window"]) if scope else None,
                used_tokens=int(scope["tokens_in_window"]) if scope else None,
                headroom_requests=round(room.requests, 2) if room else None,
                headroom_tokens=round(room.tokens, 1) if room else None,
                breaker=health.state if health else "unknown",
                reason=health.reason if health and health.state != "closed" else "",
            )
        )
    return rows
