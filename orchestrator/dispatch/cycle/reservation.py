"""The LLM picks' reservation and claim: each pick placed on deployments, what its steps draw
reserved there (and from its organization's cap), the rows claimed, the jobs enqueued on commit;
what was not claimed is refunded."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime

from django.conf import settings

from config import redis_client
from config.deployments import STEPS, deployments, job_steps
from orchestrator.budget import Budget, reservation_ids
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

    In pick order, runs of picks with one route and organization are reserved at once, each
    pick its own size (`Budget.reserve_in_order`: one round trip a deployment for the run, not
    one a pick, though every owner's learned size differs). Once a deployment's bucket refuses
    (or the budget's Redis), the later picks placed on it wait too: a cheap job must not take
    the room a costly one earlier in the schedule is waiting for. A refusing organization stops
    only its own picks.
    """
    if not picks:
        return []
    client = redis_client.shared(timeout_s=2.0)
    _, default_tokens = outreach_cost()

    def run_key(item: tuple[Pick, Route]) -> tuple[tuple[tuple[str, str], ...], str | None, bool]:
        pick, route = item
        reply = pick.tier == Tier.REPLY  # a reply makes the triage call too (config.deployments.job_steps)
        return route.steps, groups.get(pick.owner_id), reply

    scope_of = {d.label: d.scope for d in deployments()}
    placed: dict[int, tuple[str, str]] = {}
    refused: dict[str, str] = {}  # scope ("redis": the budget itself) -> the bucket that refused
    for (_, org_scope, reply), run in itertools.groupby(
        zip(picks, routing.placement.routes, strict=False), key=run_key
    ):
        group = list(run)
        route = group[0][1]
        if "redis" in refused or any(scope_of[label] in refused for label in route.labels()):
            continue
        if org_scope in refused:
            _say_capped(picks=[pick for pick, _ in group], bucket=refused[org_scope])
            continue
        ids, stopped_by = _reserve_on(
            budget=budget,
            route=route,
            org_scope=org_scope,
            tokens=[tokens(pick) if tokens else default_tokens for pick, _ in group],
            steps=job_steps(reply=reply),
        )
        # Each row keeps the route of the calls it makes (an intro's has no triage step).
        kept = route.only(job_steps(reply=reply)).encode()
        placed |= {pick.outreach_id: (rid, kept) for (pick, _), rid in zip(group, ids, strict=False)}
        for bucket in stopped_by:
            refused[bucket.rpartition(":")[0] or bucket] = bucket  # "dep:small:0:tokens" -> its scope
        capped = [bucket for bucket in stopped_by if bucket.startswith("org:")]
        if capped:
            _say_capped(picks=[pick for pick, _ in group[len(ids) :]], bucket=capped[0])
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


def _reserve_on(
    *,
    budget: Budget,
    route: Route,
    org_scope: str | None,
    tokens: list[int],
    steps: tuple[str, ...] = STEPS,
) -> tuple[list[str], list[str]]:
    """Reserve a job per entry of `tokens` (each job's tokens, in order) on each deployment of
    the route, what its steps draw from it (its calls' share of the job's tokens), all or
    nothing per job: each deployment is asked for as many as the one before granted, and what a
    later one refused is refunded on the earlier ones. Returns the joined ids and the buckets
    that stopped it short (none when all were granted)."""
    count = len(tokens)
    by_label = {d.label: d for d in deployments()}
    job_calls = [(step, used) for step, used in route.steps if step in steps]  # what this job calls
    # The configured estimate is for a writing job (LLM_CALLS_PER_OUTREACH calls); a reply's
    # triage call is one more of the same estimate. A learned figure (owner_tokens) already
    # counts every call the owner's jobs of that step made.
    calls_per_job = max(1, settings.LLM_CALLS_PER_OUTREACH + len(job_calls) - len(job_steps(reply=False)))
    granted: list[list[str]] = []
    stopped_by: list[str] = []
    for label in dict.fromkeys(used for _, used in job_calls):
        calls = sum(1 for _, used in job_calls if used == label)
        scopes = (by_label[label].scope, org_scope) if org_scope else (by_label[label].scope,)
        # The cycle widened the bursts for its costliest pick (Budget.hold_job); a job beyond
        # what any burst can hold (strict limits, or more than the limit itself) reserves the
        # most a bucket can, and the settlement charges the rest.
        largest = budget.largest_tokens(scopes=scopes)
        reservations, denied = budget.reserve_in_order(
            # A writing job's calls always fit (the cycle widened the bursts for them); a
            # reply's triage call on top may not under a small cap: the settlement counts it.
            requests_each=min(
                calls, max(len(job_steps(reply=False)), budget.largest_requests(scopes=scopes))
            ),
            # Exact in ints: one deployment taking every call reserves exactly the estimate.
            tokens=[min(-(-each * calls // calls_per_job), largest) for each in tokens[:count]],
            scopes=scopes,
        )
        granted.append([r.id for r in reservations])
        count = len(reservations)
        stopped_by += [denied.bucket] if denied is not None else []
        if count == 0:
            break
    for ids in granted:
        for rid in ids[count:]:
            budget.refund(reservation_id=rid)
    return [" ".join(ids[i] for ids in granted) for i in range(count)], stopped_by


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
