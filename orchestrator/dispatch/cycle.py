"""The dispatch cycle: the I/O shell around the pure selection policy (orchestrator.dispatch.selection).

One cycle, holding the cluster-wide lease:
  recover stuck work -> owner capacity (limits, hours, pauses) -> approved drafts to `send`
  (no LLM: owners over their organization's daily spend cap still send, and stop there)
  -> LLM slots = min(in-flight headroom, what the deployments can place now)
  -> per-tier candidates (per-owner top-k) -> select_batch (in tokens or in count)
  -> place on deployments -> reserve each owner's learned tokens -> claim -> enqueue
Every query is bounded by slots and active owners (see orchestrator.dispatch.reads), so a cycle
costs the same at a thousand queued rows as at a million.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any, cast

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from config import redis_client
from config.celery import app
from config.deployments import deployments
from config.redis_client import Client
from orchestrator.budget import PROVIDER, Budget, get_budget, reservation_ids
from orchestrator.controls import pauses
from orchestrator.deployments.placement import Route
from orchestrator.dispatch import reads, send_flow
from orchestrator.dispatch.deployment_plan import probes_mark, routing_plan
from orchestrator.dispatch.inflight import in_flight_sizing, outreach_cost
from orchestrator.dispatch.owner_limits import Capacity, OwnerRules, owner_capacity
from orchestrator.dispatch.owner_tokens import owner_tokens_load
from orchestrator.dispatch.selection import (
    Candidates,
    Cursor,
    Pick,
    StarvationGuard,
    rows_to_load,
    select_batch,
    select_sends,
)
from orchestrator.dispatch.singleton import Lease, dispatch_lease
from orchestrator.failures.recovery import recover_stuck
from outreach.models import Outreach, State
from outreach.tiers import Tier
from outreach.transitions import transition_many

log = logging.getLogger(__name__)

CURSOR_KEY = "orchestrator:dispatch:cursor"
# Apart from CURSOR_KEY: sends take turns among the owners with approved drafts, the LLM
# slots among those with queued work; one cursor would let either round skip owners of the other.
SEND_CURSOR_KEY = "orchestrator:dispatch:send_cursor"
DEFERRED_KEY = "orchestrator:dispatch:deferred"  # owner id -> reason last written (write on change)
LLM_BLOCKED_KEY = "orchestrator:dispatch:llm_blocked"  # the fault last written on waiting rows
GENERATE_TASK = "nurture.generate"
# Replies take their own lane (config.queues: queue `reply`, its own workers): a reply never
# waits in the broker behind intros and nudges dispatched before it. docs/dispatch.md says why
# a lane and not broker priorities or a worker reading both queues.
GENERATE_REPLY_TASK = "nurture.generate_reply"
SEND_TASK = "nurture.send"


@dataclass
class CycleReport:
    ran: bool = True
    recovered: int = 0
    slots: int = 0
    picks: list[Pick] = field(default_factory=list)
    generation: list[int] = field(default_factory=list)
    send: list[int] = field(default_factory=list)
    deferred: dict[int, str] = field(default_factory=dict)
    duration_ms: float = 0.0
    held: tuple[float, float] = (0.0, 0.0)  # wall-clock span the lease was held (metrics, tests)


def dispatch_cycle(*, now: datetime | None = None, budget: Budget | None = None) -> CycleReport:
    """Run one cycle if no other is running anywhere; return what it did."""
    client = redis_client.shared(timeout_s=2.0)
    started = time.perf_counter()
    with dispatch_lease(client, ttl_s=max(30.0, 10 * settings.DISPATCH_INTERVAL)) as lease:
        if lease is None:
            return CycleReport(ran=False)
        held_from = time.time()
        report = _cycle(lease=lease, client=client, now=now or timezone.now(), budget=budget or get_budget())
        report.held = (held_from, time.time())
    report.duration_ms = (time.perf_counter() - started) * 1000
    log.info(
        "dispatch cycle",
        extra={
            "slots": report.slots,
            "generation": len(report.generation),
            "send": len(report.send),
            "deferred": len(report.deferred),
            "recovered": report.recovered,
            "ms": round(report.duration_ms, 1),
        },
    )
    return report


def _cycle(*, lease: Lease, client: Client, now: datetime, budget: Budget) -> CycleReport:
    caps = reads.organization_caps_load(budget=budget)  # first: recovery may refund capped reservations
    report = CycleReport(
        recovered=recover_stuck(
            now=now, refund=lambda joined: [budget.refund(reservation_id=r) for r in reservation_ids(joined)]
        )
    )
    owners = reads.active_owners()
    capacity = _capacity(owners=[rules for rules, _ in owners], now=now)
    paused = pauses.blocking(owner_ids=capacity)
    capacity |= {owner_id: Capacity(owner_id, 0, reason) for owner_id, reason in paused.owners.items()}
    report.deferred = {c.owner_id: c.blocked_reason for c in capacity.values() if c.remaining <= 0}
    room = {owner_id: c.remaining for owner_id, c in capacity.items() if c.remaining > 0}
    # Over its organization's daily spend cap an owner still sends approved drafts (no LLM),
    # but its LLM work waits, saying why, until the next UTC day.
    spend_capped = reads.spend_capped_owners(owner_ids=room, now=now)
    report.deferred |= spend_capped
    _note_deferrals(client=client, deferred=report.deferred, paused_tiers=paused.tiers)
    paused_tiers = {owner_id: paused.tiers_of(owner_id) for owner_id in paused.tiers}
    weights = {rules.owner_id: weight for rules, weight in owners}
    report.send = _dispatch_approved(
        room=room, weights=weights, now=now, budget=budget, paused_tiers=paused_tiers, lease=lease
    )
    room = {owner_id: n for owner_id, n in room.items() if owner_id not in spend_capped}
    report.slots = _llm_slots(budget=budget, client=client)
    # A capped organization's owners are a budget group sharing what its bucket fits now.
    groups = reads.capped_owner_scopes(caps=caps, owner_ids=room)
    group_slots = _group_slots(groups=groups, budget=budget)
    cursor = Cursor.from_json(client.get(CURSOR_KEY)).keeping_groups(caps)
    # What each owner's next job is expected to cost (owner_tokens: learned from its finished
    # jobs): with fairness in tokens, what it uses moves the owner's place in the round; what
    # the provider's limit will count is the reservation's size.
    expected = owner_tokens_load(owner_ids=room, default=_cost()[1])
    costs = {o: t.settled for o, t in expected.items()} if settings.DISPATCH_FAIRNESS == "tokens" else None
    candidates = _candidates(
        room=room,
        slots=report.slots,
        weights=weights,
        groups=groups,
        group_slots=group_slots,
        paused_tiers=paused_tiers,
        costs=costs,
        now=now,
    )
    policy: dict[str, Any] = {
        "cursor": cursor,
        "weights": weights,
        "starvation_guard": _guard(),
        "groups": groups,
        "group_slots": group_slots,
        "costs": costs,
    }
    selection = select_batch(candidates, slots=report.slots, **policy)
    report.picks = list(selection.picks)
    report.generation = _reserve_and_claim(
        picks=report.picks,
        budget=budget,
        groups=groups,
        tokens={o: t.counted for o, t in expected.items()},
        now=now,
    )
    if len(report.generation) < len(report.picks):
        # The round is charged only what runs: picks the budget refused (or another claimed)
        # leave their owners' places untouched, so a costly job the bucket could not fit this
        # cycle keeps its turn instead of being charged for it (tokens fairness would starve it).
        ran = set(report.generation)
        selection = select_batch(
            {
                t: {o: [r for r in rows if r.outreach_id in ran] for o, rows in c.items()}
                for t, c in candidates.items()
            },
            slots=len(ran),
            **policy,
        )
    lease.set_if_held(CURSOR_KEY, selection.cursor.to_json())
    return report


def _guard() -> StarvationGuard | None:
    shares = settings.DISPATCH_MIN_SHARE
    return (
        StarvationGuard(min_share={Tier[name.upper()]: share for name, share in shares.items()})
        if shares
        else None
    )


def _capacity(*, owners: list[OwnerRules], now: datetime) -> dict[int, Capacity]:
    used = reads.used_today(owners=owners, now=now)
    return {r.owner_id: owner_capacity(rules=r, now=now, used_today=used.get(r.owner_id, 0)) for r in owners}


def _note_deferrals(
    *, client: Client, deferred: Mapping[int, str], paused_tiers: Mapping[int, Mapping[Tier, str]]
) -> None:
    """Say on each deferred owner's (or paused tier's) next-in-line rows why they wait, only
    when the reason changed.

    Bounded: at most 50 rows per owner or owner tier, and only where the reason is new since
    the last cycle, so a night in which every owner is outside its hours costs one write per owner.
    """
    notes = {str(o): reason for o, reason in deferred.items()}
    for o, tiers in paused_tiers.items():
        notes |= {f"{o}:{int(tier)}": reason for tier, reason in tiers.items()}
    previous = {_text(k): _text(v) for k, v in client.hgetall(DEFERRED_KEY).items()}
    for key, reason in notes.items():
        if previous.get(key) != reason:
            owner_id, _, tier = key.partition(":")
            waiting = Outreach.objects.filter(owner_id=int(owner_id), state=State.QUEUED)
            if tier:
                waiting = waiting.filter(tier=int(tier))
            head = waiting.order_by("not_before", "id")[:50]
            Outreach.objects.filter(id__in=list(head.values_list("id", flat=True))).update(
                blocked_reason=reason
            )
    pipe = client.pipeline()
    pipe.delete(DEFERRED_KEY)
    if notes:
        pipe.hset(DEFERRED_KEY, mapping=cast("dict[Any, str]", notes))  # redis-py's key union
    pipe.execute()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _dispatch_approved(
    *,
    room: dict[int, int],
    weights: Mapping[int, int],
    now: datetime,
    budget: Budget,
    paused_tiers: Mapping[int, frozenset[Tier]],
    lease: Lease,
) -> list[int]:
    """Approved drafts go to `send` under owner limits and, when configured, the send rate
    (send_flow: a cycle's worth, shared by owner weight in `select_sends`' round robin, which
    goes on from the send cursor); no LLM call, no LLM budget."""
    slots = send_flow.approved_slots(budget=budget)
    found = reads.approved_candidates(
        k_by_owner=room if slots is None else {o: min(n, slots) for o, n in room.items()},
        now=now,
        paused_tiers=paused_tiers,
    )
    ids = [i for per_owner in found.values() for i in per_owner]
    if slots is not None:
        cursor = Cursor.from_json(lease.client.get(SEND_CURSOR_KEY))
        ids = list(select_sends(found, slots=slots, cursor=cursor, weights=weights).outreach_ids)
    with transaction.atomic():
        claimed = transition_many(
            outreach_ids=ids,
            from_=State.APPROVED,
            to=State.DISPATCHED,
            note="send",
            blocked_reason="",
            at=now,
        )
        _enqueue_on_commit(SEND_TASK, claimed)
    if slots is not None:
        # The round moves by the sends that went: a draft another process took between the read
        # and the claim (cancelled, sent by hand) costs its owner no turn, as for the LLM picks.
        went = set(claimed)
        sent = select_sends(
            {o: [i for i in per_owner if i in went] for o, per_owner in found.items()},
            slots=len(went),
            cursor=cursor,
            weights=weights,
        )
        lease.set_if_held(SEND_CURSOR_KEY, sent.cursor.to_json())
        handed = set(ids)
        send_flow.waiting_label(ids=[i for o in found.values() for i in o if i not in handed], budget=budget)
    for owner_id, per_owner in found.items():
        room[owner_id] -= len(set(per_owner) & set(claimed))
    return claimed


def _llm_slots(*, budget: Budget, client: Client) -> int:
    """min(room under the in-flight target, how many whole outreach the deployments can take
    now: each placed whole on the pools its steps use, so the scarcest deployment bounds it).

    The target follows the model's observed latency (inflight.in_flight_sizing: Little's law),
    so a slower model gets more work in flight instead of a static cap idling the key. When a
    fault stops everything, the next rows in line say which deployment and what to fix."""
    requests, tokens = _cost()
    sizing_cap = settings.DISPATCH_MAX_IN_FLIGHT
    routing = routing_plan(budget=budget, client=client, count=sizing_cap)
    _note_llm_blocked(client=client, reason=routing.blocked_reason)
    sizing = in_flight_sizing(
        headroom=None, requests_each=requests, tokens_each=tokens, rate_per_s=routing.rate_per_s
    )
    in_flight_room = max(0, sizing.target - reads.llm_in_flight())
    return min(in_flight_room, len(routing.placement.routes))


def _note_llm_blocked(*, client: Client, reason: str) -> None:
    """Say on the next rows in line why LLM work waits (a misconfigured deployment), only when
    the reason changed: bounded to 100 rows a change. Claimed rows clear it."""
    if (_text(client.get(LLM_BLOCKED_KEY) or b"")) == reason:
        return
    if reason:
        head = Outreach.objects.filter(state=State.QUEUED, draft_body="").order_by("not_before", "id")[:100]
        Outreach.objects.filter(id__in=list(head.values_list("id", flat=True))).update(blocked_reason=reason)
        client.set(LLM_BLOCKED_KEY, reason)
    else:
        client.delete(LLM_BLOCKED_KEY)


def _cost() -> tuple[int, int]:
    return outreach_cost()  # one home: the in-flight sizing divides the budget's rates by it


def _group_slots(*, groups: Mapping[int, str], budget: Budget) -> dict[str, int]:
    """How many outreach each capped organization's bucket (and the provider's) fits now: one
    Redis read per organization with owners in the cycle."""
    requests, tokens = _cost()
    return {
        scope: budget.headroom(scopes=(PROVIDER, scope)).fits(requests_each=requests, tokens_each=tokens)
        for scope in set(groups.values())
    }


def _candidates(
    *,
    room: Mapping[int, int],
    slots: int,
    weights: Mapping[int, int],
    groups: Mapping[int, str],
    group_slots: Mapping[str, int],
    paused_tiers: Mapping[int, frozenset[Tier]],
    costs: Mapping[int, int] | None,
    now: datetime,
) -> Candidates:
    """Each tier queried once: which owners have ready work, then their top-k rows (`rows_to_load`:
    enough that truncation never changes the selection, capped organizations' owners included).

    An owner's room (daily limit left) is spent tier by tier, replies first, so the rows offered
    never exceed what the owner may still send today. A tier paused for an owner offers none.
    """
    left = dict(room)
    result: dict[Tier, dict[int, list]] = {}
    for tier in sorted(Tier):
        owners = reads.owners_with_ready_work(
            tier=tier,
            owner_ids=[o for o, n in left.items() if n > 0 and tier not in paused_tiers.get(o, ())],
            now=now,
        )
        k = rows_to_load(
            owners_with_work=owners,
            slots=slots,
            weights=weights,
            groups=groups,
            group_slots=group_slots,
            costs=costs,
        )
        k = {o: min(left[o], n) for o, n in k.items()}
        result[tier] = reads.ready_candidates(tier=tier, k_by_owner=k, now=now)
        for owner_id, rows in result[tier].items():
            left[owner_id] -= len(rows)
    return result


def _reserve_and_claim(
    *,
    picks: list[Pick],
    budget: Budget,
    groups: Mapping[int, str],
    now: datetime,
    tokens: Mapping[int, int] | None = None,
) -> list[int]:
    """Place each pick on deployments, reserve what its steps draw from each (all or nothing),
    claim the rows, enqueue on commit; refund what was not claimed.

    Placement is redone on the headroom of now (routing.routing_plan), picks in order; a pick
    it cannot place stays QUEUED. Each pick reserves the tokens its owner's jobs are expected
    to be counted by the provider's limit (`tokens`, owner_tokens' `counted`; the configured
    estimate for an owner without history), split
    over the deployments it was placed on by the calls its steps make there (estimate / calls
    per job a call, in place of LLM_EST_TOKENS_PER_CALL). Picks of an organization with its own
    LLM cap reserve from its scope too; any its cap cannot take after all (its workers' calls
    came first) stay QUEUED and say why.

    In pick order, runs of picks with one route, organization and size are reserved at once.
    Once a deployment's bucket refuses (or the budget's Redis), the later picks placed on it
    wait too: a cheap job must not take the room a costly one earlier in the schedule is
    waiting for. A refusing organization stops only its own picks.
    """
    if not picks:
        return []
    client = redis_client.shared(timeout_s=2.0)
    routing = routing_plan(budget=budget, client=client, count=len(picks))
    _, default_tokens = _cost()
    expected = tokens or {}

    def run_key(item: tuple[Pick, Route]) -> tuple[tuple[tuple[str, str], ...], str | None, int]:
        pick, route = item
        return route.steps, groups.get(pick.owner_id), expected.get(pick.owner_id, default_tokens)

    scope_of = {d.label: d.scope for d in deployments()}
    placed: dict[int, tuple[str, str]] = {}
    refused: dict[str, str] = {}  # scope ("redis": the budget itself) -> the bucket that refused
    for (_, org_scope, tokens_each), run in itertools.groupby(
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
            budget=budget, route=route, org_scope=org_scope, count=len(group), tokens_each=tokens_each
        )
        placed |= {
            pick.outreach_id: (rid, route.encode()) for (pick, route), rid in zip(group, ids, strict=False)
        }
        for bucket in stopped_by:
            refused[bucket.rpartition(":")[0] or bucket] = bucket  # "dep:small:0:tokens" -> its scope
        capped = [bucket for bucket in stopped_by if bucket.startswith("org:")]
        if capped:
            _say_capped(picks=[pick for pick, _ in group[len(ids) :]], bucket=capped[0])
    with transaction.atomic():
        claimed = transition_many(
            outreach_ids=list(placed), from_=State.QUEUED, to=State.DISPATCHED, blocked_reason="", at=now
        )
        _record_reservations({i: placed[i] for i in claimed})
        replies = {pick.outreach_id for pick in picks if pick.tier == Tier.REPLY}
        _enqueue_on_commit(GENERATE_REPLY_TASK, [i for i in claimed if i in replies])
        _enqueue_on_commit(GENERATE_TASK, [i for i in claimed if i not in replies])
    for outreach_id in set(placed) - set(claimed):  # someone else claimed it: give it back
        for rid in reservation_ids(placed[outreach_id][0]):
            budget.refund(reservation_id=rid)
    used = {label for i in claimed for label in Route.decode(placed[i][1]).labels()}  # type: ignore[union-attr]
    probes_mark(client=client, routing=routing, labels_used=used)
    return claimed


def _reserve_on(
    *, budget: Budget, route: Route, org_scope: str | None, count: int, tokens_each: int
) -> tuple[list[str], list[str]]:
    """Reserve `count` jobs on each deployment of the route, what its steps draw from it (its
    calls' share of a job's `tokens_each`), all or nothing per job: each deployment is asked
    for as many as the one before granted, and what a later one refused is refunded on the
    earlier ones. Returns the joined ids and the buckets that stopped it short (none when all were granted)."""
    by_label = {d.label: d for d in deployments()}
    calls_per_job, _ = _cost()
    granted: list[list[str]] = []
    stopped_by: list[str] = []
    for label in route.labels():
        calls = sum(1 for _, used in route.steps if used == label)
        scopes = (by_label[label].scope, org_scope) if org_scope else (by_label[label].scope,)
        # A learned estimate may exceed what a bucket sized for the configured one can hold:
        # reserve the most it can, the settlement charges the rest.
        reservations, denied = budget.reserve_up_to(
            count=count,
            requests_each=calls,
            tokens_each=min(
                # Fractions: one deployment taking every call reserves exactly the estimate.
                math.ceil(Fraction(tokens_each * calls, calls_per_job)),
                budget.largest_tokens(scopes=scopes),
            ),
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


def _say_capped(*, picks: list[Pick], bucket: str) -> None:
    """Picks an organization's cap refused say why they wait."""
    Outreach.objects.filter(id__in=[p.outreach_id for p in picks]).update(
        blocked_reason=f"organization LLM cap reached ({bucket})"
    )


def _record_reservations(placed: Mapping[int, tuple[str, str]]) -> None:
    """Each claimed row keeps its reservation ids (refunded on recovery, settled by the worker)
    and its route (the deployments its worker calls)."""
    if not placed:
        return
    if connection.vendor == "postgresql":  # one statement for the batch
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Outreach._meta.db_table} o SET reservation_id = v.rid, llm_route = v.route "
                "FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS v(id, rid, route) WHERE o.id = v.id",
                [list(placed), [rid for rid, _ in placed.values()], [route for _, route in placed.values()]],
            )
        return
    for i, (rid, route) in placed.items():
        Outreach.objects.filter(id=i).update(reservation_id=rid, llm_route=route)


def _enqueue_on_commit(task_name: str, ids: list[int]) -> None:
    """Enqueue one task per id after the claim commits (a worker never finds a row not yet
    DISPATCHED). Ids only in the message: no lead data in the broker or Flower. One producer
    (one broker connection) publishes the whole batch; batches publish in the order enqueued
    (replies first)."""
    if ids:
        transaction.on_commit(lambda: _publish(task_name, ids))


def _publish(task_name: str, ids: list[int]) -> None:
    with app.producer_or_acquire() as producer:
        for outreach_id in ids:
            app.send_task(task_name, args=[outreach_id], producer=producer)
