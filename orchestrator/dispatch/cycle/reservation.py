"""The LLM picks' reservation and claim: each pick placed on deployments, what its steps draw
reserved there (and from its organization's cap), the rows claimed, the jobs enqueued on commit;
what was not claimed is refunded."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from django.conf import settings

from config import redis_client
from config.deployments import deployments, job_steps
from orchestrator.budget import Budget, Denied, Draw, reservation_ids
from orchestrator.deployments.placement import Route
from orchestrator.dispatch.cycle.enqueue import GENERATE_REPLY_TASK, GENERATE_TASK, tasks_enqueue_on_commit
from orchestrator.dispatch.deployment_plan import Routing, probes_mark
from orchestrator.dispatch.inflight import outreach_cost
from orchestrator.dispatch.selection import Pick
from outreach.models import Outreach, State
from outreach.tiers import Tier
from outreach.transitions import transition_many


def picks_reserve_and_claim(
    *,
    picks: list[Pick],
    budget: Budget,
    groups: Mapping[int, str],
    now: datetime,
    routing: Routing,
    tokens: Callable[[Pick], int] | None = None,
) -> list[int]:
    """Place each pick on deployments, reserve what its steps draw from each (all or nothing),
    claim the rows, enqueue on commit; refund what was not claimed.

    The picks take the routes of `routing`, in order: the cycle's placement, made when it
    counted its slots (generation._llm_slots: placement is greedy, so every pick has a route).
    The plan read the buckets some milliseconds before the claim; the reservation checks them
    as they are, so a bucket that filled since refuses the picks placed on it, and they wait as
    below.

    Each pick reserves the tokens its owner's jobs of its step are expected to be counted by
    the provider's limit (`tokens`, owner_tokens' `counted` per owner and step; the configured
    estimate for an owner without history), split over the deployments it was placed on by the
    calls its steps make there (estimate / calls per job a call, in place of
    LLM_EST_TOKENS_PER_CALL). Picks of an organization with its own LLM cap reserve from its
    scope too; any its cap cannot take after all (its workers' calls came first) stay QUEUED
    and say why.

    All the picks are reserved in one round trip, in pick order, each its own size
    (`Budget.reserve_jobs`: a pick draws from every deployment its steps call, with its
    organization's cap, all or nothing). Once a deployment's bucket refuses, the later picks
    placed on it wait too: a cheap job must not take the room a costly one earlier in the
    schedule is waiting for. A refusing organization stops only its own picks: on a platform
    the picks of a hundred capped organizations interleave, and a call per run of one route
    and organization was 500 calls a cycle (bench/dispatch.py --organizations 100, 2026-12-07).
    """
    if not picks:
        return []
    client = redis_client.shared(timeout_s=2.0)
    _, default_tokens = outreach_cost()
    shapes: dict[tuple[Route, str | None, bool], _Draws] = {}
    jobs: list[list[Draw]] = []
    kept: list[str] = []  # each pick's route as its row keeps it
    for pick, route in zip(picks, routing.placement.routes, strict=False):
        reply = pick.tier == Tier.REPLY  # a reply makes the triage call too (config.deployments.job_steps)
        key = (route, groups.get(pick.owner_id), reply)
        shape = shapes.get(key) or shapes.setdefault(
            key, _Draws(budget=budget, route=route, org_scope=key[1], steps=job_steps(reply=reply))
        )
        jobs.append(shape(tokens(pick) if tokens else default_tokens))
        kept.append(shape.kept)
    placed: dict[int, tuple[str, str]] = {}
    capped: dict[str, list[Pick]] = {}  # an organization's bucket -> the picks it refused
    for pick, route_kept, outcome in zip(picks, kept, budget.reserve_jobs(jobs), strict=False):
        if isinstance(outcome, Denied):
            if outcome.bucket.startswith("org:"):
                capped.setdefault(outcome.bucket, []).append(pick)
            continue
        ids = outcome[0].id if len(outcome) == 1 else " ".join(r.id for r in outcome)
        placed[pick.outreach_id] = (ids, route_kept)
    for bucket, refused in capped.items():
        _say_capped(picks=refused, bucket=bucket)
    try:
        # Each claimed row keeps its reservation ids (refunded on recovery, settled by the
        # worker) and its route (the deployments its worker calls), written by the move: one
        # transaction of its own (transition_many's), the tasks published once it commits. No
        # transaction around it: that made the move's a savepoint, two more round trips a claim.
        moved = set(
            transition_many(
                outreach_ids=list(placed),
                from_=State.QUEUED,
                to=State.DISPATCHED,
                blocked_reason="",
                at=now,
                each={
                    "reservation_id": [rid for rid, _ in placed.values()],
                    "llm_route": [route for _, route in placed.values()],
                },
            )
        )
        # In pick order (the claim returns rows in the table's order): the tasks go to the
        # broker in the schedule's order, so the workers start them in it.
        claimed = [i for i in placed if i in moved]
        replies = {pick.outreach_id for pick in picks if pick.tier == Tier.REPLY}
        tasks_enqueue_on_commit(GENERATE_REPLY_TASK, [i for i in claimed if i in replies])
        tasks_enqueue_on_commit(GENERATE_TASK, [i for i in claimed if i not in replies])
    except BaseException:
        # The claim did not commit (a database error, the soft time limit), so no row records
        # these reservations and nothing else would give them back before they expire. (A
        # COMMIT whose answer was lost may have moved the rows, but published no task: stuck
        # recovery requeues them, and its refund finds nothing left to give back.) A SIGKILL
        # here still leaves them until they expire: docs/reliability.md, "Findings".
        _refund(placed.keys(), placed=placed, budget=budget)
        raise
    _refund(set(placed) - set(claimed), placed=placed, budget=budget)  # someone else claimed them
    # Each route the claimed rows keep, decoded once (500 picks keep a few distinct routes).
    used = {label for kept in {placed[i][1] for i in claimed} for label in Route.decode(kept).labels()}  # type: ignore[union-attr]
    probes_mark(client=client, routing=routing, labels_used=used)
    return claimed


class _Draws:
    """What a job on one route draws from each deployment it calls (its calls' share of the
    job's tokens), with its organization's cap: worked out once a route, organization and kind
    of job, applied to each pick's own tokens."""

    def __init__(self, *, budget: Budget, route: Route, org_scope: str | None, steps: tuple[str, ...]):
        by_label = {d.label: d for d in deployments()}
        job_calls = [(step, used) for step, used in route.steps if step in steps]  # what this job calls
        # Each row keeps the route of the calls it makes (an intro's has no triage step).
        self.kept = route.only(steps).encode()
        # The configured estimate is for a writing job (LLM_CALLS_PER_OUTREACH calls); a reply's
        # triage call is one more of the same estimate. A learned figure (owner_tokens) already
        # counts every call the owner's jobs of that step made.
        self.calls_per_job = max(
            1, settings.LLM_CALLS_PER_OUTREACH + len(job_calls) - len(job_steps(reply=False))
        )
        self.shapes: list[tuple[tuple[str, ...], int, int, int]] = []  # scopes, requests, calls, most tokens
        for label in dict.fromkeys(used for _, used in job_calls):
            calls = sum(1 for _, used in job_calls if used == label)
            scopes = (by_label[label].scope, org_scope) if org_scope else (by_label[label].scope,)
            # A writing job's calls always fit (the cycle widened the bursts for them); a
            # reply's triage call on top may not under a small cap: the settlement counts it.
            requests = min(calls, max(len(job_steps(reply=False)), budget.largest_requests(scopes=scopes)))
            # The cycle widened the bursts for its costliest pick (Budget.hold_job); a job beyond
            # what any burst can hold (strict limits, or more than the limit itself) reserves
            # the most a bucket can, and the settlement charges the rest.
            self.shapes.append((scopes, requests, calls, budget.largest_tokens(scopes=scopes)))

    def __call__(self, tokens: int) -> list[Draw]:
        """A job of `tokens`: exact in ints, one deployment taking every call reserves exactly
        the estimate."""
        return [
            Draw(scopes, requests, min(-(-tokens * calls // self.calls_per_job), largest))
            for scopes, requests, calls, largest in self.shapes
        ]


def _refund(outreach_ids: Iterable[int], *, placed: Mapping[int, tuple[str, str]], budget: Budget) -> None:
    """Give back the reservations of picks that were not claimed."""
    for outreach_id in outreach_ids:
        for rid in reservation_ids(placed[outreach_id][0]):
            budget.refund(reservation_id=rid)


def _say_capped(*, picks: list[Pick], bucket: str) -> None:
    """Picks an organization's cap refused say why they wait."""
    Outreach.objects.filter(id__any=[p.outreach_id for p in picks]).update(
        blocked_reason=f"organization LLM cap reached ({bucket})"
    )
