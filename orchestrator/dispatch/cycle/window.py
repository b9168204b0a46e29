"""The cycle's window: which owners it judges and loads. Not every active owner, but those each
round meets first going on from the cursor (`round_order`: arithmetic on the cursor, weights and
leads, no rows), as many as the last cycle's picks went through and a margin learned from the
cycles before (`window_size`; twice the slots before any cycle picked), plus the owners whose
approved drafts wait to be sent (the others' work in flight and drafts is counted without
judging them: cycle.admission's `elsewhere`). The selection says whether its picks are exactly
those every owner would give (`Selection.exact`); when not, the window widens and the cycle
selects again, so the window changes what a cycle costs, never what it picks.

  which owners have ready work, per tier (`ReadyWork`: all of them when they are few, else
  those the rounds meet first) -> each tier's round, and each budget group's, in first-tag order
  -> the first `size` with ready work of each tier's round; of each group's, as many as the
     group has places among those (its own round fills them, no more)
  -> admission, costs, candidates and the batch over those owners only (`Window`: where the rest begin)
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime

from orchestrator.dispatch import reads
from orchestrator.dispatch.cycle.admission import Closed
from orchestrator.dispatch.selection import Cursor, Pick, RoundOrder, Window, round_order
from outreach.tiers import Tier

# A dispatcher's first window holds this many times the cycle's slot bound in owners per round
# (at least WINDOW_MIN): an owner refused by admission, or whose room or rows run out, leaves
# the round, and the rest of the window fills its slots. Each widening multiplies it by WIDEN.
WINDOW_SLOTS, WINDOW_MIN, WIDEN = 2, 64, 4
# Once a cycle has picked, the next holds as many owners as its picks went through in their
# rounds, scaled to its slots (`window_learn`, `window_size`): about one a slot where every
# owner the rounds meet is admitted with work; where most are refused (outside their hours, on
# leave), as many as the picks pass, in one window instead of a window widened every cycle.
# And a margin for the owners the next rounds pass over that the last did not (refused since,
# out of rows): the most any of the last MARGIN_CYCLES cycles that picked needed beyond what
# their windows expected (`_LastCycle.needs`), MARGIN_SPARE more; WINDOW_MARGIN until that
# many have picked. Where the owners' refusals hold still, 2% instead of a fixed quarter; where
# they move, as much as they moved (a window that proves too small widens, and its need counts).
WINDOW_MARGIN, MARGIN_CYCLES, MARGIN_SPARE = 1.25, 16, 0.02
# A tier with more owners with ready work than a window takes is asked about the first
# PROBE_OWNERS x `size` owners of each of its rounds: at least half of them with ready work
# fill the window; fewer, and the window may widen. Once a cycle has asked, the next asks
# about as many as that share of owners with ready work needs to fill its window (`_probes`:
# `size` where every owner asked had some), never more. No margin of its own: the window's
# (WINDOW_MARGIN) already holds more owners than the last picks went through, so a window a
# few owners short of `size` still holds the next picks' (and one that does not widens).
PROBE_OWNERS = 2


@dataclass
class ReadyWork:
    """Which active owners have ready work, per tier, as far as the cycle asked
    (reads.ready_owners): `owners` those that have; `asked` those whose answer is known (None:
    every owner's, the tier was read whole)."""

    active: AbstractSet[int]  # the active owners (`ActiveOwners.ids`: not copied)
    now: datetime
    owners: dict[Tier, set[int]] = field(default_factory=dict)
    asked: dict[Tier, set[int] | None] = field(default_factory=dict)
    # per tier, the first ready rows of the owners asked about (`reads.ReadyOwners.first_rows`):
    # the candidates' read takes them instead of reading them again (cycle.generation)
    first_rows: dict[Tier, dict[int, list[int]]] = field(default_factory=dict)

    def whole(self, tier: Tier) -> bool:
        return tier in self.asked and self.asked[tier] is None

    def ask(self, tier: Tier, *, limit: int, owners: Collection[int]) -> None:
        """Read the tier whole if at most `limit` owners have ready work in it, else ask about
        `owners` (one statement; later, only about those not asked yet)."""
        asked = self.asked.get(tier, set())
        if asked is None:
            return
        new = [o for o in owners if o not in asked]
        if tier in self.asked and not new:
            return
        # Read whole once, at the first ask: afterwards the tier is known to have more.
        found = reads.ready_owners(
            tier=tier, now=self.now, limit=0 if tier in self.asked else limit, probe=new
        )
        have = self.owners.setdefault(tier, set())
        if found.complete and tier not in self.asked:
            have.update(o for o in found.found if o in self.active)
            self.asked[tier] = None
            return
        # The owners the loose scan found before it stopped have ready work too.
        have.update(o for o in (*found.found, *found.probed) if o in self.active)
        self.first_rows.setdefault(tier, {}).update(found.first_rows)
        self.asked[tier] = asked | set(new) | set(found.found)


@dataclass(slots=True)
class _LastCycle:
    """What the last cycle's window found, for the next one's to start from.

    `whole`: the tiers it read whole (few owners with ready work). This cycle asks them first,
    as far as its window needs, and orders their rounds over the owners found, not over every
    active owner (a round order over 10,000 owners per tier and round). Only an ordering: the
    ask itself says whether the tier is still whole; one that grew costs a second ask.

    `big`: the tiers in which it found as many owners with ready work as its window takes (it
    read them not whole: there may be more; a probe of just enough finds no more). This
    cycle asks them only about the owners its window reaches, without first scanning for up to
    a window's worth of owners with work (it would stop short again). A tier that shrank is
    then judged as a big one once (a window that finds too little widens); the next cycle,
    having found few, scans it again.

    `reached`, `served`: how many of its rounds' first owners with ready work its picks went
    through, and how many picks that was (`window_learn`): what sizes the next first window
    (`window_size`). Only a size: a window too small for the next cycle's picks says so
    (`Selection.exact`) and widens.

    `expected`: the owners a round the first window expected its picks to go through, before
    its margin (`window_size`; 0: no cycle had picked). `needs`: for each of the last
    MARGIN_CYCLES cycles that picked after one had, how far its furthest round went over that
    (`window_learn`): the margin the next windows keep (`_margin`).

    `ready_share`: per tier asked about its rounds' first owners, the share of them that had
    ready work: how many the next cycle asks about (`_probes`). Only a count: too few found, and
    the window ends at the first owner not asked about and widens."""

    whole: frozenset[Tier] = frozenset()
    big: frozenset[Tier] = frozenset()
    ready_share: dict[Tier, float] = field(default_factory=dict)
    reached: int = 0
    served: int = 0  # 0: no cycle has picked yet
    expected: float = 0.0
    needs: deque[float] = field(default_factory=lambda: deque(maxlen=MARGIN_CYCLES))


_last = _LastCycle()


@dataclass(frozen=True, slots=True)
class OwnersWindow:
    """The owners a cycle judges (`loaded`) and where those it left out begin (`window`)."""

    loaded: frozenset[int]
    window: Window
    complete: bool  # nobody with ready work was left out
    # per round, (tier, "") or (tier, group), the owners it loaded in the order the round meets them
    firsts: Mapping[tuple[Tier, str], Sequence[int]] = field(default_factory=dict)


def owners_window(
    *,
    ready: ReadyWork,
    cursor: Cursor,
    weights: Mapping[int, int],
    groups: Mapping[int, str],
    tokens: bool,
    size: int,
    also: Collection[int] = (),
    group_members: Mapping[str, Collection[int]] | None = None,
) -> OwnersWindow:
    """The first `size` owners with ready work of each tier's round and, of each budget group's
    own round, as many as the group has places among those (`places`; `groups`: owner -> its
    capped organization's scope; `group_members`: each group's active owners, when known,
    `ActiveOwners.capped`), in the order the round meets them from `cursor`, plus `also`
    (owners judged for other reasons). Asks `ready` about
    the owners it needs: a tier read whole is ordered over its owners with ready work, any
    other over every active owner, and asked about the first of each of its rounds and `also`.
    A tier the last cycle read whole is asked first (`_LastCycle`)."""
    extra = set(also)
    orders: dict[tuple[Tier, str], RoundOrder] = {}

    def places(owners: Sequence[int]) -> Counter[str]:
        """Each budget group's places among these first owners of a tier's round (a member's
        weight: its places in a round). The group's own round fills those places and no others
        while the tier's round meets no more owners, so it is read no further (until 2026-12-07
        it took `size` owners too: with many capped organizations, every owner of theirs). A
        window found short widens."""
        found: Counter[str] = Counter()
        for owner in owners:
            if (group := groups.get(owner)) is not None:
                found[group] += weights.get(owner, 1)
        return found

    every_group: Mapping[str, Collection[int]] | None = None  # the groups' active owners: once, if needed
    for tier in Tier:
        if tier in _last.whole and tier not in ready.asked:
            ready.ask(tier, limit=size, owners=extra)
        whole = ready.whole(tier)
        members: Mapping[str, Collection[int]]
        if whole:
            members = _members(ready.owners[tier], groups)
        else:
            if every_group is None:
                every_group = group_members if group_members is not None else _members(ready.active, groups)
            members = every_group
        of_tier = _orders(
            tier=tier,
            owners=ready.owners[tier] if whole else ready.active,
            members=members,
            cursor=cursor,
            weights=weights,
            tokens=tokens,
        )
        if not whole:
            probes = _probes(tier, size)
            tier_heads = of_tier[""].head(probes)
            # A group's round is asked about PROBE_OWNERS times its places among the tier's
            # first owners asked: a group whose first owners lack work still finds its places'.
            in_heads = places(tier_heads)
            heads = set(tier_heads).union(
                *(
                    order.head(min(probes, PROBE_OWNERS * in_heads[group]))
                    for group, order in of_tier.items()
                    if group
                )
            )
            ready.ask(tier, limit=0 if tier in _last.big else size, owners=heads | extra)
            if heads and not ready.whole(tier):
                _last.ready_share[tier] = len(heads & ready.owners[tier]) / len(heads)
            if ready.whole(tier):  # few with ready work: their rounds alone
                of_tier = _orders(
                    tier=tier,
                    owners=ready.owners[tier],
                    members=_members(ready.owners[tier], groups),
                    cursor=cursor,
                    weights=weights,
                    tokens=tokens,
                )
        orders |= {(tier, group): order for group, order in of_tier.items()}
    firsts: dict[tuple[Tier, str], list[int]] = {}
    in_window: dict[Tier, Counter[str]] = {}
    for (tier, group), order in orders.items():  # a tier's own round before its groups'
        if group and tier not in in_window:
            in_window[tier] = places(firsts[(tier, "")])
        n = min(size, in_window[tier][group]) if group else size
        firsts[(tier, group)] = order.first(n, ready=ready.owners[tier], asked=ready.asked[tier])
    loaded = set(extra).union(*firsts.values())
    _last.whole = frozenset(tier for tier in Tier if ready.whole(tier))
    _last.big = frozenset(tier for tier in Tier if not ready.whole(tier) and len(ready.owners[tier]) >= size)
    left_out = {
        name: first
        for name, order in orders.items()
        if (first := order.left_out(loaded, ready=ready.owners[name[0]], asked=ready.asked[name[0]]))
        is not None
    }
    return OwnersWindow(
        loaded=frozenset(loaded), window=Window(left_out=left_out), complete=not left_out, firsts=firsts
    )


def left_out_window(
    window: OwnersWindow,
    *,
    ready: ReadyWork,
    every: reads.ActiveOwners,
    capped: reads.CappedOwners,
    closed: Closed,
) -> Window:
    """The window's `Window` for the selection, with the budget groups of the active owners it
    left out that admission could admit (`Window.left_out_groups`): the `closed` owners
    (admission's `Admitted.closed`) are refused whoever judged them, so they count for nothing.
    None when one left out in no group, not closed, has ready work or may have (not asked
    about). The owners are counted, not listed: O(loaded + asked) a cycle, and O(closed owners)
    once per closing."""
    if window.complete:
        return window.window
    shut = _shut(closed, every=every, capped=capped)
    if not (capped.scopes or shut.owners):
        return window.window
    groups, loaded = capped.scopes, window.loaded

    def open_ungrouped(owner: int) -> bool:
        return owner not in groups and owner not in shut.owners

    ungrouped_out = (
        len(every.owners)
        - sum(len(owners) for owners in capped.members.values())
        - shut.ungrouped
        - sum(1 for o in loaded if o in every.owners and open_ungrouped(o))
    )
    for tier in Tier:
        if ready.whole(tier):
            if any(o not in loaded and open_ungrouped(o) for o in ready.owners[tier]):
                return window.window
            continue
        have = ready.owners.get(tier, set())
        idle = sum(
            1
            for o in ready.asked.get(tier) or ()
            if o not in loaded and o not in have and o in every.owners and open_ungrouped(o)
        )
        if ungrouped_out - idle > 0:
            return window.window
    # Per group, its owners neither loaded nor closed.
    loaded_of: Counter[str] = Counter(groups[o] for o in loaded if o in groups and o not in shut.owners)
    return Window(
        left_out=window.window.left_out,
        left_out_groups=frozenset(
            group
            for group, owners in capped.members.items()
            if len(owners) - shut.of_group[group] - loaded_of[group] > 0
        ),
    )


@dataclass(frozen=True, slots=True)
class _Shut:
    """The closed owners among the active ones, and how many of them are in no budget group
    and in each group."""

    owners: frozenset[int]
    ungrouped: int
    of_group: Counter[str]


_shut_last: list[tuple[Mapping[int, str], reads.CappedOwners, _Shut]] = []


def _shut(closed: Closed, *, every: reads.ActiveOwners, capped: reads.CappedOwners) -> _Shut:
    """`closed`'s owners among `every` (`Closed.reasons`, kept while the closing stands),
    counted once per such answer and set of budget groups."""
    reasons = closed.reasons(every)
    if _shut_last and _shut_last[0][0] is reasons and _shut_last[0][1] is capped:
        return _shut_last[0][2]
    owners = frozenset(reasons)
    shut = _Shut(
        owners=owners,
        ungrouped=sum(1 for o in owners if o not in capped.scopes),
        of_group=Counter(capped.scopes[o] for o in owners if o in capped.scopes),
    )
    _shut_last[:] = [(reasons, capped, shut)]
    return shut


def _probes(tier: Tier, size: int) -> int:
    """How many of the first owners of each of the tier's rounds a window of `size` asks about:
    as many as the last cycle's share of them with ready work needs to find `size`, at most
    PROBE_OWNERS x `size` (all a cycle asks before it has asked)."""
    share = _last.ready_share.get(tier)
    per_owner = PROBE_OWNERS if not share else min(PROBE_OWNERS, 1 / share)
    return math.ceil(per_owner * size)


def window_learn(window: OwnersWindow, picks: Collection[Pick]) -> None:
    """Remember how far into its rounds' first owners this window's picks went, per pick: for
    each round, the place of the furthest owner it picked from (the owners before it were
    passed over or served), summed over the rounds, over their picks; and how far the furthest
    round went over what the cycle's first window expected (`_LastCycle.needs`). Nothing when
    it picked nothing (no slots, or no work: it says nothing of the owners)."""
    # Each round's owners looked up among its tier's picks, not the picks among each round's
    # owners: every budget group's round going through the tier's 500 picks was 7.6 ms of a
    # cycle at 1,000 capped organizations, 1.5 this way (bench/dispatch.py, 2026-12-07).
    tiers: dict[Tier, Counter[int]] = {}
    for pick in picks:
        tiers.setdefault(pick.tier, Counter())[pick.owner_id] += 1
    reached = served = furthest = 0
    for (tier, _), firsts in window.firsts.items():
        counts = tiers.get(tier)
        if not counts:
            continue
        picked = [(n, counts[owner]) for n, owner in enumerate(firsts, start=1) if owner in counts]
        if picked:
            most = max(n for n, _ in picked)
            reached, served = reached + most, served + sum(count for _, count in picked)
            furthest = max(furthest, most)
    if served:
        if _last.expected:
            _last.needs.append(furthest / _last.expected)
        _last.reached, _last.served = reached, served


def _members(owners: Collection[int], groups: Mapping[int, str]) -> dict[str, list[int]]:
    """Each budget group's owners among `owners`."""
    members: dict[str, list[int]] = {}
    for owner in owners:
        if owner in groups:
            members.setdefault(groups[owner], []).append(owner)
    return members


def _orders(
    *,
    tier: Tier,
    owners: Collection[int],
    members: Mapping[str, Collection[int]],
    cursor: Cursor,
    weights: Mapping[int, int],
    tokens: bool,
) -> dict[str, RoundOrder]:
    """The tier's round ("") over `owners` and each budget group's own round over its
    `members` among them, in round order."""
    orders = {"": round_order(tier=tier, owners=owners, cursor=cursor, weights=weights, tokens=tokens)}
    for group, owners_of in members.items():
        orders[group] = round_order(
            tier=tier, owners=owners_of, cursor=cursor, weights=weights, tokens=tokens, group=group
        )
    return orders


def window_size(*, slot_bound: int) -> int:
    """The first window's owners per round for a cycle of at most `slot_bound` slots: as far as
    the last cycle's picks went (`window_learn`), scaled to this cycle's slots, the margin
    (`_margin`) to spare; WINDOW_SLOTS a slot before any cycle picked. Remembers what it
    expected before the margin, for `window_learn` to compare the picks' reach with.

    Fewer slots than the last picks take proportionally fewer owners. More slots take, beyond
    the owners the last picks went through, as many a slot as they needed a pick, but at most
    WINDOW_SLOTS: the owners a round passes over may be a fixed few at its front (refused
    owners never served stay there) rather than spread through it, and a cycle of a few picks
    after many such owners must not make the next, of many slots, judge them all many times
    over. A window that falls short widens, and the cycle after it learns from the wider one."""
    reached, served = _last.reached, _last.served
    if not served:
        _last.expected = 0.0
        return max(WINDOW_MIN, WINDOW_SLOTS * slot_bound)
    if slot_bound <= served:
        owners = reached * slot_bound / served
    else:
        owners = reached + (slot_bound - served) * min(WINDOW_SLOTS, reached / served)
    _last.expected = owners
    return max(WINDOW_MIN, math.ceil(_margin() * owners))


def _margin() -> float:
    """The most any of the last MARGIN_CYCLES cycles needed beyond what its window expected
    (at least nothing), MARGIN_SPARE more, at most WIDEN (a window short by more widens);
    at least WINDOW_MARGIN until that many cycles have picked."""
    margin = min(WIDEN, max([1.0, *_last.needs]) + MARGIN_SPARE)
    return margin if len(_last.needs) == MARGIN_CYCLES else max(WINDOW_MARGIN, margin)
