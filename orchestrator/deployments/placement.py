"""Placing jobs on deployments: pure, on plain data the dispatcher loaded.

A job's steps draw from the pools (deployment names) LLM_STEP_MODELS gives them: from each pool,
one call per step. Within a pool the job goes to the deployment with the most room left (in
jobs that fit), so a pool's deployments fill evenly and one whose breaker is open gets nothing.
A pool with no room that may fall back (its deployments all failing, or out of room for
LLM_FALLBACK_AFTER_S) places the job's steps on its fallback pool instead. A job is placed
whole or not at all: placement stops at the first job that a pool cannot take (all jobs draw
alike, so none after it could be placed either).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from config.deployments import REPLY_ONLY_STEPS, STEPS


@dataclass(frozen=True, slots=True)
class Room:
    """What one deployment can take now: requests and tokens (0 while its breaker is open; one
    job's worth while it is due for a probe)."""

    label: str
    pool: str
    requests: float
    tokens: float
    probe: bool = False  # due for a probe: placed on first, or a roomier pool-mate would starve it


@dataclass(frozen=True, slots=True)
class Route:
    """Where each step of one job runs (deployment labels), and which pools fell back to which.

    Stored on the outreach (`llm_route`) so the worker calls the deployment the budget was
    reserved on, and a person can see it: "plan=small#0,context=small#0,message=large#1",
    with " fallback large->small" appended when a pool fell back."""

    steps: tuple[tuple[str, str], ...]
    fallbacks: tuple[tuple[str, str], ...] = ()

    def deployment_for(self, step: str) -> str | None:
        return dict(self.steps).get(step)

    def labels(self) -> list[str]:
        """The deployments it uses, in step order, each once."""
        return list(dict.fromkeys(label for _, label in self.steps))

    def only(self, steps: tuple[str, ...]) -> Route:
        """The route of a job that calls only `steps` (an intro makes no triage call)."""
        return Route(steps=tuple(pair for pair in self.steps if pair[0] in steps), fallbacks=self.fallbacks)

    def encode(self) -> str:
        text = ",".join(f"{step}={label}" for step, label in self.steps)
        return text + "".join(f" fallback {pool}->{used}" for pool, used in self.fallbacks)

    @classmethod
    def decode(cls, text: str) -> Route | None:
        """The route stored on an outreach; None when empty or unreadable (the worker then uses
        the configured step models)."""
        head, *tail = text.split(" fallback ")
        pairs = [part.partition("=") for part in head.split(",") if part]
        if not pairs or any(not eq or step not in STEPS for step, eq, _ in pairs):
            return None
        fallbacks = tuple(tuple(item.split("->", 1)) for item in tail if "->" in item)
        return cls(steps=tuple((s, label) for s, _, label in pairs), fallbacks=fallbacks)  # type: ignore[arg-type]


@dataclass
class _Left:
    requests: float
    tokens: float
    probe: bool = False


@dataclass(frozen=True)
class Placement:
    routes: list[Route] = field(default_factory=list)
    # pool -> what stopped placement there (no room, no fallback): the dispatcher says why work waits
    stopped_at: str = ""


def place(
    *,
    count: int,
    step_pools: Mapping[str, str],
    rooms: Sequence[Room],
    fallbacks: Mapping[str, str],
    may_fall_back: frozenset[str],
    tokens_per_call: int,
) -> Placement:
    """Routes for up to `count` jobs, each placed whole, the most room first within a pool."""
    step_pools = with_reply_steps(step_pools)
    left = {room.label: _Left(room.requests, room.tokens, room.probe) for room in rooms}
    pools: dict[str, list[str]] = {}
    for room in rooms:
        pools.setdefault(room.pool, []).append(room.label)
    calls = calls_per_pool(step_pools)
    routes: list[Route] = []
    while len(routes) < count:
        chosen: dict[str, str] = {}
        used: dict[str, str] = {}
        for pool, n in calls.items():
            label, ran_on = _pick(pool, n=n, pools=pools, left=left, per_call=tokens_per_call)
            if label is None and pool in may_fall_back and pool in fallbacks:
                label, ran_on = _pick(fallbacks[pool], n=n, pools=pools, left=left, per_call=tokens_per_call)
            if label is None:
                for taken_pool, taken in chosen.items():  # whole or nothing: give back what it took
                    _take(left[taken], n=-calls[taken_pool], per_call=tokens_per_call)
                return Placement(routes=routes, stopped_at=pool)
            _take(left[label], n=n, per_call=tokens_per_call)
            chosen[pool] = label
            if ran_on != pool:
                used[pool] = ran_on
        routes.append(
            Route(
                steps=tuple((step, chosen[step_pools[step]]) for step in STEPS),
                fallbacks=tuple(sorted(used.items())),
            )
        )
    return Placement(routes=routes)


def with_reply_steps(step_pools: Mapping[str, str]) -> dict[str, str]:
    """The pools with every step named: a reply-only step not given runs where "plan" does."""
    return {**dict.fromkeys(REPLY_ONLY_STEPS, step_pools["plan"]), **step_pools}


def calls_per_pool(step_pools: Mapping[str, str]) -> Counter[str]:
    """Calls per pool that a job is placed for: a reply-only step (triage) on a pool the
    writing steps use rides on that pool's deployment uncounted (intros, most jobs, never make
    it; a reply's reservation adds it: dispatch.cycle.reservation), else it counts one there."""
    step_pools = with_reply_steps(step_pools)
    writing = Counter(step_pools[step] for step in STEPS if step not in REPLY_ONLY_STEPS)
    extra = Counter(step_pools[step] for step in REPLY_ONLY_STEPS if step_pools[step] not in writing)
    return writing + extra


def _pick(
    pool: str, *, n: int, pools: Mapping[str, list[str]], left: Mapping[str, _Left], per_call: int
) -> tuple[str | None, str]:
    """The deployment of `pool` with the most whole jobs' room for `n` calls (first on ties); a
    deployment due for a probe before any other, while it has room for the one job."""
    best, best_fit = None, 0.0
    for label in pools.get(pool, []):
        room = left[label]
        fit = min(room.requests // n, room.tokens // (n * per_call)) if per_call else room.requests // n
        if fit >= 1 and room.probe:
            return label, pool
        if fit > best_fit:
            best, best_fit = label, fit
    return best, pool


def _take(room: _Left, *, n: int, per_call: int) -> None:
    room.requests -= n
    room.tokens -= n * per_call
