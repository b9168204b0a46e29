"""The policy's entry points: `select_batch` (the LLM slots: tiers, weights, groups, tokens) and
`select_sends` (the send rate's slots: weights, in counts), both on the one schedule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.dispatch.selection.checks import (
    check_candidates,
    checked_costs,
    checked_groups,
    checked_weights,
)
from orchestrator.dispatch.selection.cursor import Cursor
from orchestrator.dispatch.selection.schedule import schedule_run
from orchestrator.dispatch.selection.values import (
    TOP_TIER,
    Candidate,
    Candidates,
    Pick,
    Selection,
    SendSelection,
    StarvationGuard,
    Window,
)
from outreach.tiers import Tier


def select_batch(
    candidates: Candidates,
    *,
    slots: int,
    cursor: Cursor,
    weights: Mapping[int, int] | None = None,
    starvation_guard: StarvationGuard | None = None,
    groups: Mapping[int, str] | None = None,
    group_slots: Mapping[str, int] | None = None,
    costs: Mapping[int, int] | None = None,
    window: Window | None = None,
) -> Selection:
    """Choose up to `slots` candidates: tiers by priority with backfill, owners by weighted round robin.

    `candidates[tier][owner_id]` is that owner's rows in its own order (oldest ready first), possibly
    truncated (see `rows_to_load`). `weights[owner_id]` is a positive int, default 1.
    `groups[owner_id]` names the budget group of an owner whose picks share a limited budget (an
    organization with its own LLM cap), and `group_slots[group]` how many picks that budget takes
    now; owners without a group are limited by `slots` only.

    Fairness invariant: within a tier, no context gets a second slot while another eligible context
    has none. Rounds start right after the cursor, so a cycle's per-owner counts in a tier differ by
    at most one among owners that still have rows. With weights it generalises to: in a round an owner
    of weight w gets w slots, interleaved, and over any stretch of the schedule (one cycle or many)
    there is a share D such that every owner that still has rows got D * w slots give or take one.

    Budget groups: a group gets at most `group_slots[group]` picks. Each of its owners keeps its place
    in the tier's round, but whichever of them comes up, the pick goes to the next owner of the group's
    own round robin (weighted, continuing from the group's position in the cursor), so over
    consecutive cycles every owner of the group gets its turn however few slots the group has. A group
    whose slots are spent leaves the round with all its owners (no longer eligible) and the others get
    its slots in the same cycle. With unit weights the fairness invariant holds among all owners that
    remain eligible; with weights it holds among owners outside groups, and within a group for its
    share of the picks.

    Fairness in tokens: with `costs[owner_id]` (the tokens that owner's next job is expected to
    use, a positive int for every owner with candidates) an owner's tag moves by cost / weight
    per pick (in units of TOKEN_UNIT tokens) instead of 1 / weight, and an owner starts at the
    cursor's position or at its lead, whichever is later (start-time fair queueing; the cursor
    carries the leads, so cycles chain into one schedule). Then over any stretch of the schedule
    every backlogged owner got tokens / weight equal give or take one job's cost: equal-weight
    owners share the budget in tokens, not in emails. Groups share their picks the same way.
    Without `costs` (fairness in counts) every tag is as described above, unchanged.

    A window (`window`: a cycle that loaded only the owners each round meets first, `RoundOrder`)
    changes nothing in the picks; the selection says whether they are exactly those every owner's
    rows would give (`Selection.exact`), and when not, the shell loads more owners and asks again.

    Tier invariant (guard off): no intro is picked while an eligible reply is unpicked, and no nudge
    while an intro is (so a group's slots go to its replies first). All slots are used when eligible
    work exists: min(slots, usable rows) picks, a group's rows counting up to its group_slots.
    """
    if slots < 0:
        raise ValueError(f"slots must be >= 0, got {slots}")
    weights = checked_weights(weights or {}, candidates)
    groups, group_slots = checked_groups(groups or {}, group_slots or {})
    check_candidates(candidates)
    if costs is not None:
        costs = checked_costs(costs, candidates)
    chosen, new_cursor, exact = schedule_run(
        candidates,
        slots=slots,
        cursor=cursor,
        weights=weights,
        guard=starvation_guard,
        groups=groups,
        group_slots=group_slots,
        costs=costs,
        window=window,
    )
    strict = chosen
    if starvation_guard is not None:
        strict, _, strict_exact = schedule_run(
            candidates,
            slots=slots,
            cursor=cursor,
            weights=weights,
            guard=None,
            groups=groups,
            group_slots=group_slots,
            costs=costs,
            window=window,
        )
        exact = exact and strict_exact
    reached: dict[tuple[Tier, int], int] = {}
    for run in (chosen, strict) if strict is not chosen else (chosen,):
        for tier, rows in run.items():
            for row, nth in rows:
                key = (tier, row.owner_id)
                reached[key] = max(reached.get(key, 0), nth)
    picks: list[Pick] = []
    for tier in sorted(Tier):
        # Picks beyond what strict priority would give this tier exist only because of the guard.
        picks.extend(
            _pick(row, nth=nth, weight=weights.get(row.owner_id, 1), guard=i >= len(strict[tier]))
            for i, (row, nth) in enumerate(chosen[tier])
        )
    return Selection(picks=tuple(picks), cursor=new_cursor, exact=exact, reached=reached)


def select_sends(
    approved: Mapping[int, Sequence[int]],
    *,
    slots: int,
    cursor: Cursor,
    weights: Mapping[int, int] | None = None,
) -> SendSelection:
    """Share `slots` sends among owners: `select_batch`'s weighted round robin, fairness in counts.

    `approved[owner_id]` is that owner's approved drafts in its own order (oldest approved first).
    Sends have no tiers and no LLM groups: each send is one message of the provider's rate, so an
    owner of weight w gets w sends a round and the owners' counts follow their weights, give or
    take one. The drafts run as one tier's round (TOP_TIER: only the owner round decides, not a
    draft's tier), continuing from `cursor` (the send cursor, persisted apart from the LLM one),
    so who sends first rotates from cycle to cycle by the schedule, never by the clock.
    """
    candidates = {
        TOP_TIER: {
            owner_id: [Candidate(outreach_id=i, owner_id=owner_id, tier=TOP_TIER) for i in ids]
            for owner_id, ids in approved.items()
        }
    }
    selection = select_batch(candidates, slots=slots, cursor=cursor, weights=weights)
    return SendSelection(
        outreach_ids=tuple(pick.outreach_id for pick in selection.picks), cursor=selection.cursor
    )


def _pick(row: Candidate, *, nth: int, weight: int, guard: bool) -> Pick:
    """`nth` is the owner's ordinal in this tier this cycle; round = ceil(nth / weight)."""
    prefix = "guard " if guard else "" if row.tier == TOP_TIER else "backfill "
    suffix = f" weight={weight}" if weight != 1 else ""
    reason = f"{prefix}tier={row.tier.name.lower()} round={-(-nth // weight)}{suffix}"
    return Pick(outreach_id=row.outreach_id, owner_id=row.owner_id, tier=row.tier, reason=reason)
