"""The dispatch cycle: the I/O shell around the pure selection policy (orchestrator.dispatch.selection).

One cycle, holding the cluster-wide lease:
  recover stuck work -> owner capacity (limits, hours) -> approved drafts to `send` (no LLM)
  -> LLM slots = min(in-flight headroom, budget headroom / per-outreach cost)
  -> per-tier candidates (per-owner top-k) -> select_batch -> reserve budget -> claim -> enqueue
Every query is bounded by slots and active owners (see orchestrator.dispatch.reads), so a cycle
costs the same at a thousand queued rows as at a million.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import redis
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Case, Value, When
from django.utils import timezone

from config.celery import app
from orchestrator.budget import PROVIDER, Budget, get_budget
from orchestrator.dispatch import reads
from orchestrator.dispatch.inflight import in_flight_sizing, outreach_cost
from orchestrator.dispatch.lease import Lease, dispatch_lease
from orchestrator.dispatch.owner_limits import Capacity, OwnerRules, owner_capacity
from orchestrator.dispatch.recovery import recover_stuck
from orchestrator.dispatch.selection import (
    Candidates,
    Cursor,
    Pick,
    StarvationGuard,
    rows_to_load,
    select_batch,
)
from orchestrator.metrics import budget_sample_record
from outreach.models import Outreach, State
from outreach.tiers import Tier
from outreach.transitions import transition_many

log = logging.getLogger(__name__)

CURSOR_KEY = "orchestrator:dispatch:cursor"
DEFERRED_KEY = "orchestrator:dispatch:deferred"  # owner id -> reason last written (write on change)
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


def redis_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)


def dispatch_cycle(*, now: datetime | None = None, budget: Budget | None = None) -> CycleReport:
    """Run one cycle if no other is running anywhere; return what it did."""
    client = redis_client()
    started = time.perf_counter()
    with dispatch_lease(client, ttl_s=max(30.0, 10 * settings.DISPATCH_INTERVAL)) as lease:
        if lease is None:
            return CycleReport(ran=False)
        held_from = time.time()
        report = _cycle(lease=lease, client=client, now=now or timezone.now(), budget=budget or get_budget())
        report.held = (held_from, time.time())
    report.duration_ms = (time.perf_counter() - started) * 1000
    budget_sample_record(budget=budget or get_budget())  # the budget chart: one row a minute, cluster-wide
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


def _cycle(*, lease: Lease, client: redis.Redis, now: datetime, budget: Budget) -> CycleReport:
    caps = reads.organization_caps_load(budget=budget)  # first: recovery may refund capped reservations
    report = CycleReport(
        recovered=recover_stuck(now=now, refund=lambda rid: budget.refund(reservation_id=rid))
    )
    owners = reads.active_owners()
    capacity = _capacity(owners=[rules for rules, _ in owners], now=now)
    report.deferred = {c.owner_id: c.blocked_reason for c in capacity.values() if c.remaining <= 0}
    _note_deferrals(client=client, deferred=report.deferred, now=now)
    room = {owner_id: c.remaining for owner_id, c in capacity.items() if c.remaining > 0}
    report.send = _dispatch_approved(room=room, now=now)
    report.slots = _llm_slots(budget=budget)
    # A capped organization's owners are a budget group sharing what its bucket fits now.
    groups = reads.capped_owner_scopes(caps=caps, owner_ids=room)
    group_slots = _group_slots(groups=groups, budget=budget)
    weights = {rules.owner_id: weight for rules, weight in owners}
    cursor = Cursor.from_json(client.get(CURSOR_KEY)).keeping_groups(caps)
    candidates = _candidates(
        room=room, slots=report.slots, weights=weights, groups=groups, group_slots=group_slots, now=now
    )
    selection = select_batch(
        candidates,
        slots=report.slots,
        cursor=cursor,
        weights=weights,
        starvation_guard=_guard(),
        groups=groups,
        group_slots=group_slots,
    )
    report.picks = list(selection.picks)
    report.generation = _reserve_and_claim(picks=report.picks, budget=budget, groups=groups)
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


def _note_deferrals(*, client: redis.Redis, deferred: Mapping[int, str], now: datetime) -> None:
    """Say on each deferred owner's next-in-line rows why they wait (only when the reason changed).

    Bounded: at most 50 rows per owner, and only for owners whose reason is new since the last
    cycle, so a night in which every owner is outside its hours costs one write per owner.
    """
    previous = {int(k): _text(v) for k, v in client.hgetall(DEFERRED_KEY).items()}
    for owner_id, reason in deferred.items():
        if previous.get(owner_id) != reason:
            head = Outreach.objects.filter(owner_id=owner_id, state=State.QUEUED).order_by(
                "not_before", "id"
            )[:50]
            Outreach.objects.filter(id__in=list(head.values_list("id", flat=True))).update(
                blocked_reason=reason
            )
    pipe = client.pipeline()
    pipe.delete(DEFERRED_KEY)
    if deferred:
        pipe.hset(DEFERRED_KEY, mapping={str(k): v for k, v in deferred.items()})
    pipe.execute()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _dispatch_approved(*, room: dict[int, int], now: datetime) -> list[int]:
    """Approved drafts go to `send` under owner limits only: no LLM call, no LLM budget."""
    found = reads.approved_candidates(k_by_owner=room, now=now)
    ids = [i for per_owner in found.values() for i in per_owner]
    with transaction.atomic():
        claimed = transition_many(outreach_ids=ids, from_=State.APPROVED, to=State.DISPATCHED, note="send")
        _enqueue_on_commit(SEND_TASK, claimed)
    for owner_id, per_owner in found.items():
        room[owner_id] -= len(set(per_owner) & set(claimed))
    return claimed


def _llm_slots(*, budget: Budget) -> int:
    """min(room under the in-flight target, how many whole outreach the budget can take now).

    The target follows the model's observed latency (inflight.in_flight_sizing: Little's law),
    so a slower model gets more work in flight instead of a static cap idling the key."""
    requests, tokens = _cost()
    headroom = budget.headroom()
    sizing = in_flight_sizing(headroom=headroom, requests_each=requests, tokens_each=tokens)
    in_flight_room = max(0, sizing.target - reads.llm_in_flight())
    if in_flight_room == 0:
        return 0
    return min(in_flight_room, headroom.fits(requests_each=requests, tokens_each=tokens))


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
    now: datetime,
) -> Candidates:
    """Each tier queried once: which owners have ready work, then their top-k rows (`rows_to_load`:
    enough that truncation never changes the selection, capped organizations' owners included).

    An owner's room (daily limit left) is spent tier by tier, replies first, so the rows offered
    never exceed what the owner may still send today.
    """
    left = dict(room)
    result: dict[Tier, dict[int, list]] = {}
    for tier in sorted(Tier):
        owners = reads.owners_with_ready_work(
            tier=tier, owner_ids=[o for o, n in left.items() if n > 0], now=now
        )
        k = rows_to_load(
            owners_with_work=owners, slots=slots, weights=weights, groups=groups, group_slots=group_slots
        )
        k = {o: min(left[o], n) for o, n in k.items()}
        result[tier] = reads.ready_candidates(tier=tier, k_by_owner=k, now=now)
        for owner_id, rows in result[tier].items():
            left[owner_id] -= len(rows)
    return result


def _reserve_and_claim(*, picks: list[Pick], budget: Budget, groups: Mapping[int, str]) -> list[int]:
    """Reserve budget for each pick, claim the rows, enqueue on commit; refund what was not claimed.

    Picks of an organization with its own LLM cap reserve from its scope too; any its cap cannot
    take after all (its workers' calls came first) stay QUEUED and say why.
    """
    if not picks:
        return []
    requests, tokens = _cost()
    batches: dict[tuple[str, ...], list[Pick]] = {}
    for pick in picks:  # in pick order: within a batch, the first picks get the budget
        scope = groups.get(pick.owner_id)
        batches.setdefault((PROVIDER, scope) if scope else (PROVIDER,), []).append(pick)
    by_id: dict[int, str] = {}
    for scopes, group in batches.items():
        reservations, denied = budget.reserve_up_to(
            count=len(group), requests_each=requests, tokens_each=tokens, scopes=scopes
        )
        by_id |= {pick.outreach_id: r.id for pick, r in zip(group, reservations, strict=False)}
        if denied is not None and denied.bucket.startswith("org:"):  # say why they wait
            capped = [pick.outreach_id for pick in group[len(reservations) :]]
            Outreach.objects.filter(id__in=capped).update(
                blocked_reason=f"organization LLM cap reached ({denied.bucket})"
            )
    with transaction.atomic():
        claimed = transition_many(
            outreach_ids=list(by_id), from_=State.QUEUED, to=State.DISPATCHED, blocked_reason=""
        )
        _record_reservations({i: by_id[i] for i in claimed})
        replies = {pick.outreach_id for pick in picks if pick.tier == Tier.REPLY}
        _enqueue_on_commit(GENERATE_REPLY_TASK, [i for i in claimed if i in replies])
        _enqueue_on_commit(GENERATE_TASK, [i for i in claimed if i not in replies])
    for outreach_id in set(by_id) - set(claimed):
        budget.refund(reservation_id=by_id[outreach_id])  # someone else claimed it: give it back
    return claimed


def _record_reservations(by_id: Mapping[int, str]) -> None:
    """Each claimed row keeps its own reservation id (refunded on recovery, settled by the worker)."""
    if not by_id:
        return
    if connection.vendor == "postgresql":  # one statement for the batch
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {Outreach._meta.db_table} o SET reservation_id = v.rid "
                "FROM unnest(%s::bigint[], %s::text[]) AS v(id, rid) WHERE o.id = v.id",
                [list(by_id), list(by_id.values())],
            )
        return
    Outreach.objects.filter(id__in=list(by_id)).update(
        reservation_id=Case(*(When(id=i, then=Value(rid)) for i, rid in by_id.items()), default=Value(""))
    )


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
