"""How many rows the shell loads per owner and tier so that truncation never changes the selection:
bounded by slots and active owners, never by queue depth."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from orchestrator.dispatch.selection.values import Candidate, Candidates, Selection
from outreach.tiers import Tier


def rows_per_owner(*, slots: int, owners_with_work: int, weight: int = 1) -> int:
    """How many rows (k) of one tier to load per owner so that truncation never changes the selection.

    k = min(slots, max(weight, slots - owners_with_work + 1)).

    Why that is enough: an owner's (w+1)-th tag in the schedule lies one full round after its first,
    and every other owner with work has a tag inside that round; so an owner gets more than w picks in
    a cycle only after each of the other owners_with_work - 1 owners got one, and it can take at most
    max(w, slots - (owners_with_work - 1)) picks, never more than slots. Truncated to k it never runs
    dry before it would have stopped anyway, and a tier whose owner was truncated still has >= slots
    rows, so the slot allocation across tiers is unchanged too.
    Bounded: a tier query returns at most owners * k rows; with owners >= slots that is one row per
    owner (w when weighted), otherwise at most ((slots + 1) / 2) ** 2: slots and active owners, never
    queue depth. Pass only owners the shell will offer; a smaller count than the truth is safe (larger k).
    """
    if slots <= 0 or owners_with_work <= 0:
        return 0
    return min(slots, max(weight, slots - owners_with_work + 1))


def rows_to_load(
    *,
    owners_with_work: Collection[int],
    slots: int,
    weights: Mapping[int, int] | None = None,
    groups: Mapping[int, str] | None = None,
    group_slots: Mapping[str, int] | None = None,
    costs: Mapping[int, int] | None = None,
) -> dict[int, int]:
    """k per owner for one tier's rows (`rows_per_owner`), given the owners with work in that tier.

    Owners outside groups never leave a round before their rows run out, but a group's owners do when
    its slots are spent, so only the former count as "other owners served first": k for an owner
    outside groups is rows_per_owner(slots, owners outside groups with work). A group's owner takes
    at most what its group's round robin gives it: that round among the group's owners with work, on
    min(slots, group_slots) picks; no owner of the group leaves it before the others (they share the
    budget), so the same argument holds there. Higher tiers may spend some of the group's slots
    first: counting all of them only makes k larger, which is safe.

    Fairness in tokens (`costs`): the weight's part is played by how many picks the owner can take
    before every other owner of its round had one. Each other owner's first tag is at most the
    largest step (cost / weight) of the round past the position (a lead is at most one step
    ahead), so the owner takes at most floor(largest step / its step) + 1 picks first.
    """
    weights, groups, group_slots = weights or {}, groups or {}, group_slots or {}
    free = [o for o in owners_with_work if o not in groups]
    members: dict[str, list[int]] = {}
    for o in owners_with_work:
        if o in groups:
            members.setdefault(groups[o], []).append(o)

    def largest_step(round_: Sequence[int]) -> tuple[int, int]:
        """The round's largest cost / weight, as (cost, weight): compared and divided in ints,
        since a round may hold thousands of owners."""
        if not costs:
            return 1, 1
        cost, weight = 0, 1
        for o in round_:
            if costs[o] * weight > cost * weights.get(o, 1):
                cost, weight = costs[o], weights.get(o, 1)
        return cost, weight

    # One largest step per round, not per owner: a cycle may judge thousands of owners.
    largest = {name: largest_step(round_) for name, round_ in members.items()}
    largest_free = largest_step(free) if free else (1, 1)

    def per_round(owner: int, largest: tuple[int, int]) -> int:
        if costs is None:
            return weights.get(owner, 1)
        cost, weight = largest  # floor(largest step / the owner's step) + 1
        return cost * weights.get(owner, 1) // (weight * costs[owner]) + 1

    return {
        o: (
            rows_per_owner(
                slots=min(slots, group_slots.get(groups[o], 0)),
                owners_with_work=len(members[groups[o]]),
                weight=per_round(o, largest[groups[o]]),
            )
            if o in groups
            else rows_per_owner(slots=slots, owners_with_work=len(free), weight=per_round(o, largest_free))
        )
        for o in owners_with_work
    }


class Loaded(NamedTuple):
    """The rows the shell loaded for a selection (`rows_loaded`), and per tier the owners whose
    rows a guess may have cut short: given all they asked for, fewer than `rows_to_load` would
    have asked."""

    candidates: dict[Tier, dict[int, list[Candidate]]]
    cut: dict[Tier, set[int]]


def rows_loaded(
    *,
    ready: Mapping[Tier, Collection[int]],
    room: Mapping[int, int],
    slots: int,
    weights: Mapping[int, int],
    groups: Mapping[int, str],
    group_slots: Mapping[str, int],
    costs: Mapping[int, int] | None,
    paused_tiers: Mapping[int, frozenset[Tier]],
    whole: Collection[int],
    load: Callable[[Tier, dict[int, int]], Mapping[int, list[Candidate]]],
) -> Loaded:
    """Each tier's rows, one `load(tier, k by owner)` a tier, replies first: an owner's room
    (what it may still send today) is spent tier by tier, so the rows offered never exceed it,
    and a tier paused for an owner offers none.

    `rows_to_load`'s k is what truncation can never change, but for a budget group's owners it
    is the group's slots less its other owners with work: about 500 rows for each owner of a
    small capped organization, where it takes one or two (platforms of many capped
    organizations). So an owner not in `whole` is first given a guess: twice what it would need
    were every owner outside groups (`rows_to_load` without them), and not beyond its safe k.
    Where the guess cut an owner short (`Loaded.cut`) and the selection then took every row
    it had (`ran_dry`), the shell loads that owner whole and selects again; where it never ran
    dry, the rows it was not given were never looked at, and the selection is the one the safe
    k gives. An owner with work in a later tier is given its safe k: what it is given here is
    what its later tiers' room is charged, and a guess would leave them more rows than the safe
    k does."""
    tiers = sorted(Tier)
    left = dict(room)
    candidates: dict[Tier, dict[int, list[Candidate]]] = {}
    cut: dict[Tier, set[int]] = {}
    for i, tier in enumerate(tiers):
        later = [ready.get(t, ()) for t in tiers[i + 1 :]]  # the shell's are sets
        owners = [
            o for o in ready.get(tier, ()) if left.get(o, 0) > 0 and tier not in paused_tiers.get(o, ())
        ]
        safe = rows_to_load(
            owners_with_work=owners,
            slots=slots,
            weights=weights,
            groups=groups,
            group_slots=group_slots,
            costs=costs,
        )
        # Without groups the safe k is the guess's own formula: nothing to guess.
        guess = (
            rows_to_load(owners_with_work=owners, slots=slots, weights=weights, costs=costs) if groups else {}
        )
        ask = {}
        for o, k in safe.items():
            k = min(left[o], k)
            exact = not guess or o in whole or any(o in work for work in later)
            ask[o] = k if exact else min(k, 2 * guess[o])
        candidates[tier] = found = dict(load(tier, ask))
        cut[tier] = {o for o, n in ask.items() if n < min(left[o], safe[o]) and len(found.get(o, ())) == n}
        for owner_id, rows in found.items():
            left[owner_id] -= len(rows)
    return Loaded(candidates=candidates, cut=cut)


def ran_dry(
    selection: Selection, *, offered: Candidates, loaded: Candidates, cut: Mapping[Tier, Collection[int]]
) -> set[int]:
    """Owners a guess cut short (`Loaded.cut`) whose rows in that tier the selection took to the
    last (`Selection.reached`, in any of its runs): with the rows they were not given the
    selection might differ. `loaded`: the rows as loaded (less any the shell dropped as
    unsendable); an owner offered fewer than that was stopped by admission, which keeps only its
    admitted rows however many were loaded."""
    reached = selection.reached
    dry = set()
    for tier, owners in cut.items():
        offered_tier, loaded_tier = offered.get(tier, {}), loaded.get(tier, {})
        for owner in owners:
            n = len(offered_tier.get(owner, ()))
            if n == len(loaded_tier.get(owner, ())) and reached.get((tier, owner), 0) >= n:
                dry.add(owner)
    return dry
