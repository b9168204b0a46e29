"""The cycle's LLM work: how many jobs may start now, which (the pure `select_batch`), and the
cursor that carries the schedule to the next cycle.

  LLM slots = min(in-flight headroom, what the deployments can place now)
  -> per-tier candidates (per-owner top-k) -> select_batch (in tokens or in count)
  -> reserve and claim (`reservation`) -> the cursor, over the picks that ran
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings

from config.redis_client import Client
from orchestrator.budget import PROVIDER, Budget
from orchestrator.dispatch import reads
from orchestrator.dispatch.cycle.admission import picks_admit, unsendable_drop
from orchestrator.dispatch.cycle.cursor_state import cursor_store
from orchestrator.dispatch.cycle.notes import llm_blocked_note
from orchestrator.dispatch.cycle.reservation import picks_reserve_and_claim
from orchestrator.dispatch.deployment_plan import Routing, per_call_tokens, routing_plan
from orchestrator.dispatch.inflight import in_flight_sizing, outreach_cost
from orchestrator.dispatch.owner_tokens import JobCosts
from orchestrator.dispatch.selection import (
    Candidates,
    Cursor,
    Pick,
    Selection,
    StarvationGuard,
    Window,
    ran_dry,
    rows_loaded,
    select_batch,
)
from orchestrator.dispatch.selection.admission import Shared
from orchestrator.dispatch.singleton import Lease
from outreach.tiers import Tier


@dataclass(frozen=True, slots=True)
class Generation:
    """What the cycle's LLM part did: the slots it had, the picks it made, the rows it claimed,
    and how long the claim took (reserve, move, publish). Not `exact`: its window left out an
    owner the schedule reached, so nothing was claimed and the shell widens the window."""

    slots: int
    picks: list[Pick]
    claimed: list[int]
    claim_ms: float = 0.0
    exact: bool = True


def generation_dispatch(
    *,
    lease: Lease,
    client: Client,
    cursor: Cursor,
    ready: Mapping[Tier, Collection[int]],
    groups: Mapping[int, str],
    room: Mapping[int, int],
    weights: Mapping[int, int],
    paused_tiers: Mapping[int, frozenset[Tier]],
    shared: Shared,
    job_costs: JobCosts,
    price: Callable[[int, str | None], Decimal],
    now: datetime,
    budget: Budget,
    llm_in_flight: int,
    window: Window | None = None,
    first_rows: Mapping[Tier, Mapping[int, Sequence[int]]] | None = None,
) -> Generation:
    """Select, reserve and claim this cycle's LLM jobs among the owners with `room` (admitted:
    cycle.admission) and ready work (`ready`, per tier), held to the admission's shared rooms
    (`shared`); persist the cursor while the lease is held. `groups`: owner -> its capped
    organization's scope (budget groups). With a `window` (cycle.window) the selection also says
    whether its picks are the full selection's; if not, nothing is claimed (`Generation.exact`).
    `llm_in_flight`: the LLM jobs in flight (reads.llm_in_flight), read once by the cycle.
    `first_rows`: per tier, owners' first ready rows the window's probe read (cycle.window)."""
    # What each owner's next job of each step is expected to cost (`job_costs`, owner_tokens:
    # learned from its finished jobs): with fairness in tokens, what it uses moves the owner's
    # place in the round; what the provider's limit will count sizes the cycle (slots, in-flight
    # target), the buckets' burst (the costliest must fit at once) and each pick's reservation.
    if job_costs.owners:
        budget.hold_job(tokens=job_costs.largest_counted())
    per_call = per_call_tokens(budget=budget, job_tokens=job_costs.smallest_counted())
    slots, routing = _llm_slots(budget=budget, client=client, per_call=per_call, in_flight=llm_in_flight)
    # A capped organization's owners are a budget group sharing what its bucket fits now.
    groups = {owner: groups[owner] for owner in room if owner in groups}  # the window's, not all
    group_slots = _group_slots(groups=groups, budget=budget, per_call=per_call)
    costs = (
        {o: t.settled for o, t in job_costs.owners.items()}
        if settings.DISPATCH_FAIRNESS == "tokens"
        else None
    )
    policy: dict[str, Any] = {
        "cursor": cursor,
        "weights": weights,
        "starvation_guard": _guard(),
        "groups": groups,
        "group_slots": group_slots,
        "costs": costs,
    }

    def attempt(whole: set[int]) -> tuple[Candidates, Selection, bool, set[int]]:
        """Load (the owners in `whole` whole, the others a guess: `rows_loaded`), select and
        admit: the candidates the selection was made from, the selection, whether it is exact
        (`Window`), and the owners a guess cut short whose rows the selection ran dry."""
        loaded = rows_loaded(
            ready=ready,
            room=room,
            slots=slots,
            weights=weights,
            groups=groups,
            group_slots=group_slots,
            costs=costs,
            paused_tiers=paused_tiers,
            whole=whole,
            load=lambda tier, k: reads.ready_candidates(
                tier=tier, k_by_owner=k, now=now, first_rows=(first_rows or {}).get(tier)
            ),
        )
        # Admission's row rules: no suppressed lead's row, no pick past a shared room (cycle.admission).
        sendable = unsendable_drop(loaded.candidates, now=now)
        exact, dry = True, set()

        def select(offered: Candidates) -> Selection:
            nonlocal exact
            selection = select_batch(offered, slots=slots, window=window, **policy)
            exact = exact and selection.exact  # each re-selection too: the refusals follow the picks
            dry.update(ran_dry(selection, offered=offered, loaded=sendable, cut=loaded.cut))
            return selection

        candidates, selection = picks_admit(candidates=sendable, shared=shared, select=select, price=price)
        return candidates, selection, exact, dry

    whole: set[int] = set()
    while True:
        candidates, selection, exact, dry = attempt(whole)
        if not exact or dry <= whole:
            break
        whole |= dry  # loaded whole, selected again: rows a guess left out must not decide
    if not exact:
        return Generation(slots=slots, picks=[], claimed=[], exact=False)
    picks = list(selection.picks)
    claim_started = time.perf_counter()
    claimed = picks_reserve_and_claim(
        picks=picks,
        budget=budget,
        routing=routing,
        groups=groups,
        tokens=lambda pick: job_costs.of(pick.owner_id, pick.tier.name.lower()).counted,
        now=now,
    )
    claim_ms = (time.perf_counter() - claim_started) * 1000
    if len(claimed) < len(picks):
        # The round is charged only what runs: picks the budget refused (or another claimed)
        # leave their owners' places untouched, so a costly job the bucket could not fit this
        # cycle keeps its turn instead of being charged for it (tokens fairness would starve it).
        ran = set(claimed)
        selection = select_batch(
            {
                t: {o: [r for r in rows if r.outreach_id in ran] for o, rows in c.items()}
                for t, c in candidates.items()
            },
            slots=len(ran),
            **policy,
        )
    cursor_store(lease, selection.cursor)
    return Generation(slots=slots, picks=picks, claimed=claimed, claim_ms=claim_ms)


def _guard() -> StarvationGuard | None:
    shares = settings.DISPATCH_MIN_SHARE
    return (
        StarvationGuard(min_share={Tier[name.upper()]: share for name, share in shares.items()})
        if shares
        else None
    )


def _llm_slots(
    *, budget: Budget, client: Client, per_call: int | None, in_flight: int
) -> tuple[int, Routing]:
    """min(room under the in-flight target, how many whole outreach the deployments can take
    now: each placed whole on the pools its steps use, so the scarcest deployment bounds it),
    and that placement: the picks take its routes in order (placement is greedy, so its first
    k routes are what placing k would give).

    The target follows the model's observed latency (inflight.in_flight_sizing: Little's law),
    so a slower model gets more work in flight instead of a static cap idling the key. When a
    fault stops everything, the next rows in line say which deployment and what to fix.
    Both count each call `per_call` tokens: the cheapest learned job's (owner_tokens), since a
    count sized on the configured estimate idles the key whenever jobs are cheaper than it,
    while a count above what the buckets fit only leaves the last picks QUEUED."""
    requests, tokens = outreach_cost()
    sizing_cap = settings.DISPATCH_MAX_IN_FLIGHT
    routing = routing_plan(budget=budget, client=client, count=sizing_cap, per_call=per_call)
    llm_blocked_note(client=client, reason=routing.blocked_reason)
    sizing = in_flight_sizing(
        headroom=None, requests_each=requests, tokens_each=tokens, rate_per_s=routing.rate_per_s
    )
    in_flight_room = max(0, sizing.target - in_flight)
    return min(in_flight_room, len(routing.placement.routes)), routing


def _group_slots(*, groups: Mapping[int, str], budget: Budget, per_call: int | None) -> dict[str, int]:
    """How many outreach each capped organization's bucket (and the provider's) fits now, each
    call `per_call` tokens (as `_llm_slots`): every organization with owners in the cycle read
    in one round trip (one each until 2026-12-07: 22 ms a cycle at 100 capped organizations,
    bench/dispatch.py --organizations 100)."""
    requests, tokens = outreach_cost()
    tokens = requests * per_call if per_call else tokens
    scopes = sorted(set(groups.values()))
    rooms = budget.headrooms([(PROVIDER, scope) for scope in scopes])
    return {
        scope: room.fits(requests_each=requests, tokens_each=tokens)
        for scope, room in zip(scopes, rooms, strict=True)
    }
