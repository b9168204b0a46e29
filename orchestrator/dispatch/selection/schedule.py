"""The schedule: per tier, owners' service tags on a virtual clock, taken in (tag, owner) order.

`schedule_run` is `select_batch`'s engine: guard reservations then strict priority, tier by tier,
each tier's weighted round robin (`_TierRound`) going on from the cursor, a budget group's places
filled by its own round (`_GroupRound`), tags moving by picks or by tokens (`_Clock`).
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import math
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from fractions import Fraction
from operator import itemgetter
from types import MappingProxyType

from orchestrator.dispatch.selection.cursor import Cursor, Leads, LeadsChange, Move, Position, scaled
from orchestrator.dispatch.selection.values import Candidate, Candidates, OwnerIds, StarvationGuard, Window
from outreach.tiers import Tier

TOKEN_UNIT = 1_000  # fairness in tokens: a tag moves by cost / (weight * TOKEN_UNIT) per pick


# The last read-only weights a clock was given and their distinct values: the active owners'
# (reads.ActiveOwners), which stand from cycle to cycle while the owners do.
_weights_seen: tuple[Mapping[int, int], frozenset[int]] | None = None


def weight_steps(weights: Mapping[int, int]) -> frozenset[int]:
    """The distinct weights, every clock's scale is a multiple of each (`_Clock`). Remembered
    for a read-only mapping (a `MappingProxyType`: nobody writes through it), by identity:
    gathering them from every active owner took 0.44 ms a clock at 40,000 owners, eight clocks a
    cycle (2026-12-06). Any other mapping, which its holder may change, is read each time."""
    global _weights_seen
    if not isinstance(weights, MappingProxyType):
        return frozenset(weights.values())
    if _weights_seen is None or _weights_seen[0] is not weights:
        _weights_seen = (weights, frozenset(weights.values()))
    return _weights_seen[1]


class _Clock:
    """How one round's tags start and move: by picks (counts) or by what they cost (tokens).

    Counts: an owner's tags are k / weight, from the first after the round's start position.
    Tokens: a pick moves the owner's tag by cost / (weight * TOKEN_UNIT); an owner starts at its
    lead from the cursor, or at the start position's phase when it has none (it is not ahead).
    `tags` keeps each owner's next tag, so `leads_after` can carry the ones still ahead.

    Tags are exact: kept as ints in units of 1 / `scale`, the least common multiple of the
    start's phase's denominator, the leads' scale and every weight's step, so
    the heaps compare ints (a round may hold thousands of owners; Fractions made it the cycle's
    costliest part). The leads come and go as ints too (`Leads`); a position's phase stays a
    Fraction (one a round).
    """

    def __init__(
        self,
        *,
        start: Position | None,
        weights: Mapping[int, int],
        costs: Mapping[int, int] | None,
        leads: Leads,
    ) -> None:
        self.start, self.weights, self.costs, self.leads = start, weights, costs, leads
        unit = 1 if costs is None else TOKEN_UNIT
        # every weight's step, not only the round's owners': one scale for every round of the
        # cycle and from cycle to cycle while the weights stand, so the leads keep theirs
        self.own_scale = math.lcm(unit, *(w * unit for w in weight_steps(weights)))
        self.scale = math.lcm(start.phase.denominator if start else 1, leads.scale, self.own_scale)
        self.per_lead = self.scale // leads.scale  # a lead's tick in the clock's
        # where owners not ahead start (tokens)
        self.phase = scaled(start.phase, self.scale) if start else 0
        self.tags: dict[int, int] = {}
        self.last: int | None = None  # the tag of the last pick
        self.last_owner: int | None = None  # whose place it took

    def firsts(self, owners: Iterable[int]) -> list[tuple[int, int]]:
        """(first tag, owner) of each owner, kept as each owner's next tag (`leads_after`)."""
        keyed = self.first_tags(owners)
        self.tags.update((o, tag) for tag, o in keyed)
        return keyed

    def first_tags(self, owners: Iterable[int]) -> list[tuple[int, int]]:
        """(first tag, owner) of each owner, in one pass (a round may hold thousands): counts,
        the first k / weight after the start; tokens, its lead or the start's phase."""
        if self.costs is None:
            return [(self._first_counted(o), o) for o in owners]
        phase, per_lead, leads = self.phase, self.per_lead, self.leads.ticks
        # an owner without a lead starts at the phase (leads are positive)
        return [((at if (at := leads.get(o, 0) * per_lead) > phase else phase), o) for o in owners]

    def tokens_order(self, owners: Collection[int]) -> Iterator[int]:
        """`owners` in (first tag, owner) order, in tokens, as far as the caller takes them:
        those not ahead of the start's phase, at it, in id order; then those ahead, by their
        leads (`Leads.ranked`: kept ranked from cycle to cycle, not sorted again). Mid-round
        that is most of them: a pick moves its owner a job's tokens ahead, a round or more. A
        window takes the first few hundred of thousands."""
        leads = self.leads.ticks
        ranked = self.leads.ranked()
        bar = self.phase // self.per_lead  # ahead: lead * per_lead > phase, so lead > bar (ints)
        behind = bisect.bisect_right(ranked, (bar, math.inf))
        members = owners if isinstance(owners, set | frozenset) else set(owners)
        # A cursor's leads all lie ahead of its position (`leads_after` drops the rest), so the
        # owners not ahead are those without one; a lead at or behind it (a cursor made by
        # hand) counts as none. Mid-round most owners have one: those without, by a set's
        # difference and sorted, rather than passing over every owner with one in id order.
        not_ahead: Iterator[int]
        if behind:
            not_ahead = (o for o in _in_id_order(owners) if leads.get(o, 0) <= bar)
        elif 2 * len(leads) > len(members):
            # (a set's difference with a dict looks each of the set up in it, in C)
            not_ahead = iter(sorted(members.difference(leads)))
        else:
            not_ahead = itertools.filterfalse(leads.__contains__, _in_id_order(owners))
        # Iterators of C's alone: a window takes the first few hundred as one slice (RoundOrder).
        ahead = filter(members.__contains__, map(itemgetter(1), itertools.islice(ranked, behind, None)))
        return itertools.chain(not_ahead, ahead)

    def first_tag(self, owner: int) -> int:
        """The owner's first tag (`first_tags`, one owner)."""
        if self.costs is None:
            return self._first_counted(owner)
        at = self.leads.ticks.get(owner, 0) * self.per_lead
        return at if at > self.phase else self.phase

    def _first_counted(self, owner: int) -> int:
        """The owner's first tag k/weight whose (tag, owner_id) comes strictly after the start."""
        if self.start is None:
            return 0
        weight = self.weights.get(owner, 1)
        k = -(-self.phase * weight // self.scale)  # ceil(phase * weight)
        if k * self.scale == self.phase * weight and owner <= self.start.owner_id:
            k += 1  # same tag as the last pick: owners up to it were served in this round already
        return k * (self.scale // weight)

    def after(self, *, owner: int, tag: int, cost_of: int | None = None) -> int:
        """The owner's next tag after a pick at `tag`; `cost_of` names whose job the pick was
        (a group's place is filled by another owner of the group)."""
        weight = self.weights.get(owner, 1)
        self.last, self.last_owner = tag, owner
        step = (
            self.scale // weight
            if self.costs is None
            else self.costs[owner if cost_of is None else cost_of] * (self.scale // (weight * TOKEN_UNIT))
        )
        self.tags[owner] = tag + step
        return tag + step

    @property
    def last_pick(self) -> tuple[int, int] | None:
        """(tag, owner) of the round's last pick: the place it took; None before any."""
        return None if self.last is None or self.last_owner is None else (self.last, self.last_owner)

    def position(self) -> Position | None:
        """Where the round stopped: its last pick's place, else where it started (made once a
        selection, not at every pick: a Position holds a Fraction)."""
        if (pick := self.last_pick) is None:
            return self.start
        tag, owner = pick
        return Position(owner_id=owner, phase=Fraction(tag % self.scale, self.scale))

    def leads_after(self) -> Leads | None:
        """The leads to persist (tokens only): every owner's next tag, in the frame of the last
        pick's round (its integer part subtracted), when ahead of that pick; owners not seen
        this cycle keep theirs, moved into the new frame. When neither the frame nor the scale
        moved (most cycles: a frame moves about once a round), the new leads are the old, less
        those the last pick passed, with the seen owners' own, and they say so (`Leads.since`):
        the dispatcher then writes those alone."""
        if self.costs is None or self.last is None:
            return None
        last, per_lead, old = self.last, self.per_lead, self.leads.ticks
        base = last // self.scale * self.scale
        if base or per_lead != 1:
            leads = {o: at - base for o, lead in old.items() if (at := lead * per_lead) > last}
            for o, tag in self.tags.items():  # the owners seen this cycle: their own next tags
                if tag > last:
                    leads[o] = tag - base
                else:
                    leads.pop(o, None)
            # in the lowest terms over the clock's own scale: what old weights or a start's
            # phase added goes where the leads allow, and the next clock's scale is this one
            common = math.gcd(self.scale // self.own_scale, *leads.values())
            if common == 1:
                return Leads(self.scale, leads)
            return Leads(self.scale // common, {o: n // common for o, n in leads.items()})
        # dict.copy clones the table; dict() inserts every lead again once the table has holes
        # (the leads a cycle dropped): 2.2 ms a round at 40,000 owners (2026-12-06)
        leads = old.copy() if isinstance(old, dict) else dict(old)
        ranked = self.leads.ranked()  # the leads the last pick passed are the first ranked
        dropped = {o for _, o in ranked[: bisect.bisect_right(ranked, (last, math.inf))]}
        for o in dropped:
            del leads[o]
        changed: dict[int, int] = {}
        for o, tag in self.tags.items():
            if tag > last:
                if leads.get(o) != tag:
                    leads[o] = changed[o] = tag
                    dropped.discard(o)
            elif leads.pop(o, None) is not None:
                dropped.add(o)
        since = LeadsChange(base=weakref.ref(self.leads), changed=changed, dropped=frozenset(dropped))
        return Leads(self.scale, leads, since=since)


class _TierRound:
    """One tier's schedule during a selection: taken in stages (guard reserves, then priority).

    Owner o of weight w has service tags k/w (k = 0, 1, ...) on a virtual clock whose unit is a round;
    rows go in (tag, owner_id) order, so a round serves each owner w times, interleaved, and an
    unweighted round is one row per owner in owner-id order. Tags start strictly after the cursor
    position (phase, owner_id): unweighted, that is the first owner id above the last one served,
    wrapping around. An owner whose rows run out leaves the round; the others carry on.

    A group's owners keep their tags (the group's places in the round), but each place is filled by
    the next owner of the group's own round (`_GroupRound`). The group keeps one place per owner with
    rows left: when one runs out, its furthest place goes. When its slots are spent, all go.
    """

    def __init__(
        self,
        *,
        tier: Tier,
        rows_by_owner: Mapping[int, Sequence[Candidate]],
        cursor: Cursor,
        weights: Mapping[int, int],
        groups: Mapping[int, str],
        group_left: dict[str, int],
        costs: Mapping[int, int] | None,
        window: Window | None = None,
    ) -> None:
        self.rows, self.weights, self.groups, self.group_left = rows_by_owner, weights, groups, group_left
        start = cursor.position(tier)
        left_out = window.left_out if window is not None else {}
        # The first owner a windowed cycle left out of this round (None: nobody), whether the
        # round ran out of rows before its count, and the first place a group gave up: what
        # `exact` judges the picks by.
        self.horizon = left_out.get((tier, ""))
        self.left_out_groups = window.left_out_groups if window is not None else None
        self.short = False
        self.first_dropped: tuple[int, int] | None = None
        owners = [o for o, rows in rows_by_owner.items() if rows]
        self.clock = _Clock(start=start, weights=weights, costs=costs, leads=cursor.leads_of(tier))
        self.heap = self.clock.firsts(owners)
        heapq.heapify(self.heap)  # O(owners); then O(log owners) per pick
        self.places: dict[str, dict[int, int]] = {}  # group -> its places in the heap: owner -> tag
        # group -> its places furthest first, (-tag, -owner), with stale entries (a place since
        # moved on, or given up) skipped when popped: the furthest in O(log places), not a scan
        self.furthest: dict[str, list[tuple[int, int]]] = {}
        for tag, o in self.heap:
            if o in groups:
                self.places.setdefault(groups[o], {})[o] = tag
                self.furthest.setdefault(groups[o], []).append((-tag, -o))
        for entries in self.furthest.values():
            heapq.heapify(entries)
        members: dict[str, list[int]] = {}
        for o in owners:
            if o in groups:
                members.setdefault(groups[o], []).append(o)
        self.group_rounds = {
            group: _GroupRound(
                owners=owners_of,
                clock=_Clock(
                    start=cursor.position(tier, group),
                    weights=weights,
                    costs=costs,
                    leads=cursor.leads_of(tier, group),
                ),
                horizon=left_out.get((tier, group)),
            )
            for group, owners_of in members.items()
        }
        self.taken: dict[int, int] = {}

    def take(self, count: int) -> list[tuple[Candidate, int]]:
        """Up to `count` more rows in schedule order, each with its owner's ordinal in this tier."""
        chosen: list[tuple[Candidate, int]] = []
        while self.heap and len(chosen) < count:
            tag, place = heapq.heappop(self.heap)
            group = self.groups.get(place)
            if group is not None and (place not in self.places[group] or self.group_left[group] <= 0):
                continue  # a place the group gave up, or the group's slots are spent: it leaves the round
            owner = place if group is None else self.group_rounds[group].next()
            nth = self.taken[owner] = self.taken.get(owner, 0) + 1
            chosen.append((self.rows[owner][nth - 1], nth))
            next_tag = self.clock.after(owner=place, tag=tag, cost_of=owner)
            more = nth < len(self.rows[owner])
            if group is not None:
                self._group_served(group=group, place=place, next_tag=next_tag, more=more)
            elif more:
                heapq.heappush(self.heap, (next_tag, place))
        self.short = self.short or (len(chosen) < count and not self._left_out_spent())
        return chosen

    def _left_out_spent(self) -> bool:
        """Every owner the window left out is in a budget group whose slots are spent: with
        them back in, the round would only pass them over (slots never come back in a run)."""
        groups = self.left_out_groups
        return groups is not None and all(self.group_left.get(g, 1) <= 0 for g in groups)

    def exact(self) -> bool:
        """Whether the picks are those this round makes with the owners a window left out back
        in: it never reached the first of them (each pick comes before it, the group rounds'
        too, and the round did not run out of rows while owners were left out, unless all of
        them were in budget groups whose slots were spent by then), and every place
        a group gave up lies beyond the last pick (with every owner in, a group gives up its
        furthest place, which lies further still; the places up to the last pick are the same)."""
        if self.horizon is None:
            return True  # nobody left out: the group rounds' owners are the tier's, all in
        if self.short:
            return False
        last = self.clock.last_pick
        if last is not None and not _before(last, self.clock.scale, self.horizon):
            return False
        if last is not None and self.first_dropped is not None and self.first_dropped <= last:
            return False
        return all(r.exact() for r in self.group_rounds.values())

    def _group_served(self, *, group: str, place: int, next_tag: int, more: bool) -> None:
        self.group_left[group] -= 1
        heapq.heappush(self.heap, (next_tag, place))
        self.places[group][place] = next_tag
        heapq.heappush(self.furthest[group], (-next_tag, -place))
        self.group_rounds[group].served(more=more)
        if not more:
            # One owner fewer, so one place fewer: the furthest goes, not the emptied owner's own,
            # so the places still due in this round are filled and no owner of the group waits a
            # round while another owner gets a second pick (property-tested).
            places, furthest = self.places[group], self.furthest[group]
            while furthest:
                neg_tag, neg_owner = heapq.heappop(furthest)
                if places.get(-neg_owner) == -neg_tag:
                    del places[-neg_owner]
                    dropped = (-neg_tag, -neg_owner)
                    self.first_dropped = min(self.first_dropped or dropped, dropped)
                    break

    def group_positions(self) -> dict[str, Position]:
        return {g: p for g, r in self.group_rounds.items() if (p := r.clock.position()) is not None}

    def leads(self) -> dict[str, Leads]:
        """Leads to persist per round ("" the tier's own, else a group's); tokens only."""
        rounds = {"": self.clock, **{g: r.clock for g, r in self.group_rounds.items()}}
        return {g: leads for g, clock in rounds.items() if (leads := clock.leads_after()) is not None}


class _GroupRound:
    """A group's own weighted round robin over its owners with rows left, from the group's position."""

    def __init__(
        self, *, owners: Sequence[int], clock: _Clock, horizon: tuple[Fraction, int] | None = None
    ) -> None:
        self.clock, self.horizon = clock, horizon
        self.heap = clock.firsts(owners)
        heapq.heapify(self.heap)
        self.current: tuple[int, int] | None = None

    def exact(self) -> bool:
        """It served no owner at or after the first its window left out (`horizon`)."""
        if self.horizon is None or self.current is None:
            return True
        return _before(self.current, self.clock.scale, self.horizon)

    def next(self) -> int:
        self.current = heapq.heappop(self.heap)
        tag, owner = self.current
        self.next_tag = self.clock.after(owner=owner, tag=tag)
        return owner

    def served(self, *, more: bool) -> None:
        """After `next()`: its owner comes round again if it has rows left."""
        assert self.current is not None, "served() follows next()"
        if more:
            heapq.heappush(self.heap, (self.next_tag, self.current[1]))


def schedule_run(
    candidates: Candidates,
    *,
    slots: int,
    cursor: Cursor,
    weights: Mapping[int, int],
    guard: StarvationGuard | None,
    groups: Mapping[int, str],
    group_slots: Mapping[str, int],
    costs: Mapping[int, int] | None,
    window: Window | None = None,
) -> tuple[dict[Tier, list[tuple[Candidate, int]]], Cursor, bool]:
    """Rows per tier in schedule order: guard reservations first (tier order), then strict priority
    fills the rest; each tier's round continues from one stage to the next. Also the new cursor,
    and whether the picks are exact (`Window`: those with every owner left out back in)."""
    group_left = dict(group_slots)  # spent across tiers: replies first
    rounds = {
        tier: _TierRound(
            tier=tier,
            rows_by_owner=candidates.get(tier, {}),
            cursor=cursor,
            weights=weights,
            groups=groups,
            group_left=group_left,
            costs=costs,
            window=window,
        )
        for tier in sorted(Tier)
    }
    chosen: dict[Tier, list[tuple[Candidate, int]]] = {tier: [] for tier in Tier}
    left = slots
    for stage in ("guard", "priority") if guard is not None else ("priority",):
        for tier in sorted(Tier):
            want = left if stage == "priority" else min(left, guard.reserved(tier=tier, slots=slots))  # type: ignore[union-attr]
            taken = rounds[tier].take(want)
            chosen[tier] += taken
            left -= len(taken)
    new_cursor = cursor.moved(
        {
            tier: Move(
                position=round_.clock.position(), groups=round_.group_positions(), leads=round_.leads()
            )
            for tier, round_ in rounds.items()
        }
    )
    return chosen, new_cursor, all(round_.exact() for round_ in rounds.values())


def _before(key: tuple[int, int], scale: int, horizon: tuple[Fraction, int]) -> bool:
    """(tag in units of 1 / `scale`, owner) comes strictly before `horizon` (an exact tag, owner)."""
    tag, owner = key
    bound, bound_owner = horizon
    return (tag * bound.denominator, owner) < (bound.numerator * scale, bound_owner)


class RoundOrder:
    """Owners in the order a round first meets them, (first tag, owner id) ascending, tags in
    units of 1 / `scale` (`tag`: an owner's): a windowed cycle loads the first ones and tells
    `select_batch` where the rest begin (`left_out`). Made as far as it is read (a window
    reads the first few hundred of thousands of owners), and kept as read.

    The order may hold owners without ready work (`ready`: those with some, None: all) and
    owners not asked about yet (`asked`: those whose work is known, None: all): the first
    owner not asked about ends what `first` can take, and `left_out` counts it as one that
    may have work."""

    __slots__ = ("_met", "_rest", "scale", "tag")

    def __init__(self, owners: Iterable[int], *, tag: Callable[[int], int], scale: int) -> None:
        self._rest, self._met = iter(owners), list[int]()
        self.tag, self.scale = tag, scale

    def _meet(self, n: int) -> None:
        """Read the order as far as its first `n` owners (or its end), in one slice (its
        iterators are C's: a generator's step per owner was most of a window's first 512 at
        10,000 owners)."""
        if (short := n - len(self._met)) > 0:
            self._met += itertools.islice(self._rest, short)

    def __iter__(self) -> Iterator[int]:
        n = 0
        while True:
            if n == len(self._met):
                self._meet(max(2 * n, 64))
                if n == len(self._met):
                    return
            met = self._met[n:]
            n += len(met)
            yield from met

    @property
    def owners(self) -> list[int]:
        """Every owner, in order."""
        return list(self)

    def head(self, n: int) -> list[int]:
        """The first `n` owners."""
        self._meet(n)
        return self._met[:n]

    def first(
        self, n: int, *, ready: Collection[int] | None = None, asked: Collection[int] | None = None
    ) -> list[int]:
        """The first `n` owners with ready work, up to the first not asked about."""
        taken: list[int] = []
        for owner in self:
            if len(taken) == n or (asked is not None and owner not in asked):
                break
            if ready is None or owner in ready:
                taken.append(owner)
        return taken

    def left_out(
        self,
        loaded: Collection[int],
        *,
        ready: Collection[int] | None = None,
        asked: Collection[int] | None = None,
    ) -> tuple[Fraction, int] | None:
        """The first owner of the order not in `loaded` that has ready work or may have (not
        asked about), as (exact tag, owner); None: there is none."""
        for owner in self:
            if owner in loaded:
                continue
            if ready is None or owner in ready or (asked is not None and owner not in asked):
                return Fraction(self.tag(owner), self.scale), owner
        return None


def _in_id_order(owners: Collection[int]) -> Sequence[int]:
    """The owners in id order: kept so when they are an `OwnerIds`, else sorted."""
    return owners.ordered if isinstance(owners, OwnerIds) else sorted(owners)


def round_order(
    *,
    tier: Tier,
    owners: Collection[int],
    cursor: Cursor,
    weights: Mapping[int, int],
    tokens: bool,
    group: str = "",
) -> RoundOrder:
    """The order in which the tier's round (or, naming `group`, that budget group's own round)
    would first meet `owners`, going on from the cursor: each owner's first tag as the round's
    clock gives it (`_Clock.first_tags`; fairness in `tokens`, else in counts). Arithmetic only,
    no rows.

    In tokens, every owner not ahead of the round's position starts at it: those owners in id
    order, then the owners ahead by their leads (`_Clock.tokens_order`: as far as the order is
    read). In counts, by each owner's first tag: O(owners log owners)."""
    clock = _Clock(
        start=cursor.position(tier, group) if group else cursor.position(tier),
        weights=weights,
        costs={} if tokens else None,
        leads=cursor.leads_of(tier, group),
    )
    if tokens:
        return RoundOrder(clock.tokens_order(owners), tag=clock.first_tag, scale=clock.scale)
    # Owners in id order, then a stable sort by tag alone: (tag, owner) order without comparing
    # thousands of tuples.
    keyed = clock.first_tags(_in_id_order(owners))
    keyed.sort(key=itemgetter(0))
    return RoundOrder([o for _, o in keyed], tag=clock.first_tag, scale=clock.scale)
