"""Which queued outreach may run this cycle: the dispatcher's pure selection policy.

The dispatch shell loads each tier's per-owner top-k candidates (k from `rows_per_owner`), calls
`select_batch`, then checks owner capacity, reserves budget, claims and enqueues the picks and persists
the returned cursor (`Cursor.to_json`). Nothing here touches the ORM, Redis, the clock or randomness,
so the policy is property-tested on its own (tests/orchestrator/test_selection.py).

Policy:
1. Slots per tier: reply, then intro, then nudge (strict priority); slots a tier cannot use are
   backfilled from the next tier's rows already loaded, so min(slots, candidates) picks are made.
   An optional `StarvationGuard` first reserves a minimum share of the slots for lower tiers with work.
2. Within a tier: weighted round robin across owners, continuing from the persisted cursor
   (`_TierRound`), so no owner monopolises a tier however deep its backlog.
3. Fairness in tokens (`costs` given, DISPATCH_FAIRNESS=tokens): an owner's place in the round moves
   by what its picks cost (estimated tokens / weight) instead of by one pick, start-time fair
   queueing on the same virtual clock, each owner's lead carried in the cursor; so equal-weight owners
   get equal token shares, an owner whose jobs cost 3x taking a third of the picks.
4. Budget groups (an organization with its own LLM cap): a group's owners together take at most
   its `group_slots` this cycle, shared by the group's own round robin (also in the cursor); once
   the group is spent its owners leave the round and the others get those slots (backfill).
A round costs O(slots * log(owners) + owners): nothing here grows with queue depth.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

from outreach.tiers import Tier

TOP_TIER = min(Tier)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One queued outreach row, as the shell loaded it for this cycle."""

    outreach_id: int
    owner_id: int
    tier: Tier


@dataclass(frozen=True, slots=True)
class Pick:
    """A candidate chosen to run this cycle; `reason` is for logs (e.g. "backfill tier=intro round=1")."""

    outreach_id: int
    owner_id: int
    tier: Tier
    reason: str


@dataclass(frozen=True, slots=True)
class Position:
    """Where a tier's schedule stopped: the last owner served, at `phase` (in [0, 1)) of its round.

    `phase` is always 0 when no weights are used; it is exact (a Fraction) so positions compare
    without rounding and survive JSON as text ("2/3").
    """

    owner_id: int
    phase: Fraction = Fraction(0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "phase", Fraction(self.phase))
        if not 0 <= self.phase < 1:
            raise ValueError(f"cursor phase must be in [0, 1), got {self.phase}")


@dataclass(frozen=True, slots=True)
class Cursor:
    """Per tier, the schedule position of the last pick; the next cycle starts strictly after it.

    `groups` holds, per tier and budget group, where the group's own round robin stopped (the last
    of its owners served there), so its few slots rotate among its owners from cycle to cycle.
    `Cursor()` starts every tier at the lowest owner id. Persist with `to_json()` / `from_json()`;
    a tier without a position (never served) is simply absent from the JSON.

    `leads` (fairness in tokens only): per tier, and per group ("" for the tier's own round), the
    owners whose next tag lies ahead of the position, with that tag in the position's frame (the
    position's phase plus what they are ahead by): an owner that just took a costly job waits its
    turn across cycles. Owners at or behind the clock are absent (they start at the position).
    """

    positions: tuple[tuple[Tier, Position], ...] = ()
    groups: tuple[tuple[Tier, str, Position], ...] = ()
    leads: tuple[tuple[Tier, str, int, Fraction], ...] = ()

    def __post_init__(self) -> None:
        by_tier = {Tier(tier): position for tier, position in self.positions}
        if len(by_tier) != len(self.positions):
            raise ValueError("a cursor holds one position per tier")
        by_group = {(Tier(tier), group): position for tier, group, position in self.groups}
        if len(by_group) != len(self.groups) or any(tier not in by_tier for tier, _ in by_group):
            raise ValueError("a cursor holds one position per tier and group, in tiers it has served")
        object.__setattr__(self, "positions", tuple(sorted(by_tier.items())))
        object.__setattr__(self, "groups", tuple((t, g, p) for (t, g), p in sorted(by_group.items())))
        by_lead = {(Tier(t), g, o): Fraction(lead) for t, g, o, lead in self.leads}
        if len(by_lead) != len(self.leads) or any(
            t not in by_tier or lead <= 0 for (t, _, _), lead in by_lead.items()
        ):
            raise ValueError(
                "a cursor holds one positive lead per tier, group and owner, in tiers it has served"
            )
        object.__setattr__(
            self, "leads", tuple((t, g, o, lead) for (t, g, o), lead in sorted(by_lead.items()))
        )

    def position(self, tier: Tier, group: str | None = None) -> Position | None:
        if group is not None:
            return next((p for t, g, p in self.groups if (t, g) == (tier, group)), None)
        return dict(self.positions).get(tier)

    def leads_of(self, tier: Tier, group: str = "") -> dict[int, Fraction]:
        return {o: lead for t, g, o, lead in self.leads if (t, g) == (tier, group)}

    def moved(
        self,
        *,
        tier: Tier,
        position: Position | None,
        groups: Mapping[str, Position] | None = None,
        leads: Mapping[str, Mapping[int, Fraction]] | None = None,
    ) -> Cursor:
        """`leads` replaces the tier's leads of the rounds it names ("" the tier's, else a group's)."""
        if position is None:
            return self
        groups, leads = groups or {}, leads or {}
        return Cursor(
            positions=(*((t, p) for t, p in self.positions if t != tier), (tier, position)),
            groups=(
                *((t, g, p) for t, g, p in self.groups if t != tier or g not in groups),
                *((tier, g, p) for g, p in groups.items()),
            ),
            leads=(
                *((t, g, o, x) for t, g, o, x in self.leads if t != tier or g not in leads),
                *((tier, g, o, x) for g, by_owner in leads.items() for o, x in by_owner.items()),
            ),
        )

    def keeping_groups(self, groups: Collection[str]) -> Cursor:
        """Only the positions of these groups (the shell drops organizations no longer capped)."""
        return Cursor(
            positions=self.positions,
            groups=tuple(x for x in self.groups if x[1] in groups),
            leads=tuple(x for x in self.leads if x[1] == "" or x[1] in groups),
        )

    def as_dict(self) -> dict[str, dict[str, object]]:
        result: dict[str, dict[str, object]] = {
            tier.name.lower(): _pos_dict(pos) for tier, pos in self.positions
        }
        for tier, group, pos in self.groups:
            by_group = result[tier.name.lower()].setdefault("groups", {})
            assert isinstance(by_group, dict)
            by_group[group] = _pos_dict(pos)
        for tier, group, owner, lead in self.leads:
            by_round = result[tier.name.lower()].setdefault("leads", {})
            assert isinstance(by_round, dict)
            by_round.setdefault(group, {})[str(owner)] = str(lead)
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, object]]) -> Cursor:
        """Inverse of `as_dict`; raises ValueError on anything else (the shell may then use `Cursor()`)."""
        try:
            positions = tuple((Tier[name.upper()], _position(pos)) for name, pos in data.items())
            groups = tuple(
                (Tier[name.upper()], _str(group), _position(gpos))
                for name, pos in data.items()
                for group, gpos in _mapping(pos.get("groups", {})).items()
            )
            leads = tuple(
                (Tier[name.upper()], _str(group), int(owner), Fraction(_str(lead)))
                for name, pos in data.items()
                for group, by_owner in _mapping(pos.get("leads", {})).items()
                for owner, lead in _mapping(by_owner).items()
            )
        except (KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
            raise ValueError(f"not a selection cursor: {data!r}") from exc
        return cls(positions=positions, groups=groups, leads=leads)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes | None) -> Cursor:
        """`None` or empty (nothing persisted yet) gives the start cursor."""
        if not text:
            return cls()
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"not a selection cursor: {text!r}")
        return cls.from_dict(data)


def _pos_dict(pos: Position) -> dict[str, object]:
    return {"owner_id": pos.owner_id, "phase": str(pos.phase)}


def _position(data: object) -> Position:
    pos = _mapping(data)
    return Position(owner_id=_int(pos["owner_id"]), phase=Fraction(str(pos["phase"])))


@dataclass(frozen=True, slots=True)
class StarvationGuard:
    """Reserve at least ceil(slots * share) slots for a lower tier while it has work (off by default).

    Chosen over ageing because it needs no clock and bounds the wait directly: a lower tier with work
    is served every cycle however much reply traffic arrives. Reservations are taken in tier order and
    capped by what the tier has; slots a tier cannot use go back to normal priority, so none are wasted.
    """

    min_share: Mapping[Tier, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        shares = {
            Tier(tier): Fraction(share).limit_denominator(10_000) for tier, share in self.min_share.items()
        }
        if TOP_TIER in shares:
            raise ValueError(f"min_share is for lower tiers; {TOP_TIER.name} is always served first")
        if any(not 0 <= share <= 1 for share in shares.values()) or sum(shares.values()) > 1:
            raise ValueError(f"min_share values must be in [0, 1] and sum to at most 1, got {self.min_share}")
        object.__setattr__(self, "min_share", MappingProxyType(shares))

    def reserved(self, *, tier: Tier, slots: int) -> int:
        # Fractions, not floats: 10 * 0.3 must reserve 3 slots, not ceil(3.0000000000000004) = 4.
        return math.ceil(slots * Fraction(self.min_share.get(tier, 0)))


@dataclass(frozen=True, slots=True)
class Selection:
    """The picks in dispatch order (tier by tier, schedule order within a tier) and the cursor to persist."""

    picks: tuple[Pick, ...]
    cursor: Cursor

    def count(self, tier: Tier) -> int:
        return sum(1 for pick in self.picks if pick.tier == tier)


Candidates = Mapping[Tier, Mapping[int, Sequence[Candidate]]]


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

    Tier invariant (guard off): no intro is picked while an eligible reply is unpicked, and no nudge
    while an intro is (so a group's slots go to its replies first). All slots are used when eligible
    work exists: min(slots, usable rows) picks, a group's rows counting up to its group_slots.
    """
    if slots < 0:
        raise ValueError(f"slots must be >= 0, got {slots}")
    weights = _checked_weights(weights or {})
    groups, group_slots = _checked_groups(groups or {}, group_slots or {})
    _check_candidates(candidates)
    if costs is not None:
        costs = _checked_costs(costs, candidates)
    chosen, new_cursor = _run(
        candidates,
        slots=slots,
        cursor=cursor,
        weights=weights,
        guard=starvation_guard,
        groups=groups,
        group_slots=group_slots,
        costs=costs,
    )
    strict = chosen
    if starvation_guard is not None:
        strict = _run(
            candidates,
            slots=slots,
            cursor=cursor,
            weights=weights,
            guard=None,
            groups=groups,
            group_slots=group_slots,
            costs=costs,
        )[0]
    picks: list[Pick] = []
    for tier in sorted(Tier):
        # Picks beyond what strict priority would give this tier exist only because of the guard.
        picks.extend(
            _pick(row, nth=nth, weight=weights.get(row.owner_id, 1), guard=i >= len(strict[tier]))
            for i, (row, nth) in enumerate(chosen[tier])
        )
    return Selection(picks=tuple(picks), cursor=new_cursor)


@dataclass(frozen=True, slots=True)
class SendSelection:
    """Approved drafts to hand to `send` this cycle, in schedule order, and the send cursor to persist."""

    outreach_ids: tuple[int, ...]
    cursor: Cursor


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

    def per_round(owner: int, round_: Sequence[int]) -> int:
        if costs is None:
            return weights.get(owner, 1)
        step = {o: Fraction(costs[o], weights.get(o, 1)) for o in round_}
        return math.floor(max(step.values()) / step[owner]) + 1

    return {
        o: (
            rows_per_owner(
                slots=min(slots, group_slots.get(groups[o], 0)),
                owners_with_work=len(members[groups[o]]),
                weight=per_round(o, members[groups[o]]),
            )
            if o in groups
            else rows_per_owner(slots=slots, owners_with_work=len(free), weight=per_round(o, free))
        )
        for o in owners_with_work
    }


TOKEN_UNIT = 1_000  # fairness in tokens: a tag moves by cost / (weight * TOKEN_UNIT) per pick


class _Clock:
    """How one round's tags start and move: by picks (counts) or by what they cost (tokens).

    Counts: an owner's tags are k / weight, from the first after the round's start position.
    Tokens: a pick moves the owner's tag by cost / (weight * TOKEN_UNIT); an owner starts at its
    lead from the cursor, or at the start position's phase when it has none (it is not ahead).
    `tags` keeps each owner's next tag, so `leads_after` can carry the ones still ahead.
    """

    def __init__(
        self,
        *,
        start: Position | None,
        weights: Mapping[int, int],
        costs: Mapping[int, int] | None,
        leads: Mapping[int, Fraction],
    ) -> None:
        self.start, self.weights, self.costs, self.leads = start, weights, costs, leads
        self.tags: dict[int, Fraction] = {}
        self.last: Fraction | None = None  # the tag of the last pick

    def first(self, owner: int) -> Fraction:
        if self.costs is None:
            tag = _first_tag(start=self.start, owner_id=owner, weight=self.weights.get(owner, 1))
        else:
            tag = max(self.start.phase if self.start else Fraction(0), self.leads.get(owner, Fraction(0)))
        self.tags[owner] = tag
        return tag

    def after(self, *, owner: int, tag: Fraction, cost_of: int | None = None) -> Fraction:
        """The owner's next tag after a pick at `tag`; `cost_of` names whose job the pick was
        (a group's place is filled by another owner of the group)."""
        weight = self.weights.get(owner, 1)
        self.last = tag
        step = (
            Fraction(1, weight)
            if self.costs is None
            else Fraction(self.costs[owner if cost_of is None else cost_of], weight * TOKEN_UNIT)
        )
        self.tags[owner] = tag + step
        return tag + step

    def position(self, owner: int) -> Position:
        assert self.last is not None
        return Position(owner_id=owner, phase=self.last - math.floor(self.last))

    def leads_after(self) -> dict[int, Fraction] | None:
        """The leads to persist (tokens only): every owner's next tag, in the frame of the last
        pick's round (its integer part subtracted), when ahead of that pick; owners not seen
        this cycle keep theirs, moved into the new frame."""
        if self.costs is None or self.last is None:
            return None
        base = math.floor(self.last)
        phase = self.last - base
        tags = {**self.leads, **self.tags}
        return {o: tag - base for o, tag in tags.items() if tag - base > phase}


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
    ) -> None:
        self.rows, self.weights, self.groups, self.group_left = rows_by_owner, weights, groups, group_left
        self.position = cursor.position(tier)
        self.clock = _Clock(start=self.position, weights=weights, costs=costs, leads=cursor.leads_of(tier))
        owners = [o for o, rows in rows_by_owner.items() if rows]
        self.heap = [(self.clock.first(o), o) for o in owners]
        heapq.heapify(self.heap)  # O(owners); then O(log owners) per pick
        self.places: dict[str, dict[int, Fraction]] = {}  # group -> its places in the heap: owner -> tag
        for tag, o in self.heap:
            if o in groups:
                self.places.setdefault(groups[o], {})[o] = tag
        self.group_rounds = {
            group: _GroupRound(
                owners=[o for o in owners if groups.get(o) == group],
                clock=_Clock(
                    start=cursor.position(tier, group),
                    weights=weights,
                    costs=costs,
                    leads=cursor.leads_of(tier, group),
                ),
            )
            for group in self.places
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
            self.position = self.clock.position(place)
            more = nth < len(self.rows[owner])
            if group is not None:
                self._group_served(group=group, place=place, next_tag=next_tag, more=more)
            elif more:
                heapq.heappush(self.heap, (next_tag, place))
        return chosen

    def _group_served(self, *, group: str, place: int, next_tag: Fraction, more: bool) -> None:
        self.group_left[group] -= 1
        heapq.heappush(self.heap, (next_tag, place))
        self.places[group][place] = next_tag
        self.group_rounds[group].served(more=more)
        if not more:
            # One owner fewer, so one place fewer: the furthest goes, not the emptied owner's own,
            # so the places still due in this round are filled and no owner of the group waits a
            # round while another owner gets a second pick (property-tested).
            places = self.places[group]
            del places[max(places, key=lambda o: (places[o], o))]

    def group_positions(self) -> dict[str, Position]:
        return {g: r.position for g, r in self.group_rounds.items() if r.position is not None}

    def leads(self) -> dict[str, dict[int, Fraction]]:
        """Leads to persist per round ("" the tier's own, else a group's); tokens only."""
        rounds = {"": self.clock, **{g: r.clock for g, r in self.group_rounds.items()}}
        return {g: leads for g, clock in rounds.items() if (leads := clock.leads_after()) is not None}


class _GroupRound:
    """A group's own weighted round robin over its owners with rows left, from the group's position."""

    def __init__(self, *, owners: Sequence[int], clock: _Clock) -> None:
        self.clock, self.position = clock, clock.start
        self.heap = [(clock.first(o), o) for o in owners]
        heapq.heapify(self.heap)
        self.current: tuple[Fraction, int] | None = None

    def next(self) -> int:
        self.current = heapq.heappop(self.heap)
        tag, owner = self.current
        self.next_tag = self.clock.after(owner=owner, tag=tag)
        self.position = self.clock.position(owner)
        return owner

    def served(self, *, more: bool) -> None:
        """After `next()`: its owner comes round again if it has rows left."""
        assert self.current is not None, "served() follows next()"
        if more:
            heapq.heappush(self.heap, (self.next_tag, self.current[1]))


def _first_tag(*, start: Position | None, owner_id: int, weight: int) -> Fraction:
    """The owner's first tag k/weight whose (tag, owner_id) comes strictly after the cursor position."""
    if start is None:
        return Fraction(0)
    k = math.ceil(start.phase * weight)
    if Fraction(k, weight) == start.phase and owner_id <= start.owner_id:
        k += 1  # same tag as the last pick: owners up to it were served in this round already
    return Fraction(k, weight)


def _run(
    candidates: Candidates,
    *,
    slots: int,
    cursor: Cursor,
    weights: Mapping[int, int],
    guard: StarvationGuard | None,
    groups: Mapping[int, str],
    group_slots: Mapping[str, int],
    costs: Mapping[int, int] | None,
) -> tuple[dict[Tier, list[tuple[Candidate, int]]], Cursor]:
    """Rows per tier in schedule order: guard reservations first (tier order), then strict priority
    fills the rest; each tier's round continues from one stage to the next. Also the new cursor."""
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
    new_cursor = cursor
    for tier, round_ in rounds.items():
        new_cursor = new_cursor.moved(
            tier=tier, position=round_.position, groups=round_.group_positions(), leads=round_.leads()
        )
    return chosen, new_cursor


def _pick(row: Candidate, *, nth: int, weight: int, guard: bool) -> Pick:
    """`nth` is the owner's ordinal in this tier this cycle; round = ceil(nth / weight)."""
    prefix = "guard " if guard else "" if row.tier == TOP_TIER else "backfill "
    suffix = f" weight={weight}" if weight != 1 else ""
    reason = f"{prefix}tier={row.tier.name.lower()} round={-(-nth // weight)}{suffix}"
    return Pick(outreach_id=row.outreach_id, owner_id=row.owner_id, tier=row.tier, reason=reason)


def _check_candidates(candidates: Candidates) -> None:
    """Rejects rows filed under the wrong tier or owner and duplicates (shell bugs)."""
    seen: set[int] = set()
    for tier, by_owner in candidates.items():
        for owner_id, rows in by_owner.items():
            for row in rows:
                if row.tier != tier or row.owner_id != owner_id or row.outreach_id in seen:
                    raise ValueError(
                        f"candidate {row} misfiled under tier={tier!r} owner={owner_id} or repeated"
                    )
                seen.add(row.outreach_id)


def _checked_groups(
    groups: Mapping[int, str], group_slots: Mapping[str, int]
) -> tuple[Mapping[int, str], Mapping[str, int]]:
    missing = set(groups.values()) - set(group_slots)
    bad = {g: n for g, n in group_slots.items() if not isinstance(n, int) or isinstance(n, bool) or n < 0}
    if missing or bad:
        raise ValueError(f"every group needs group_slots >= 0: missing {sorted(missing)}, bad {bad}")
    return groups, group_slots


def _checked_costs(costs: Mapping[int, int], candidates: Candidates) -> Mapping[int, int]:
    owners = {o for by_owner in candidates.values() for o, rows in by_owner.items() if rows}
    bad = {o: costs.get(o) for o in sorted(owners) if not _positive_int(costs.get(o))}
    if bad:
        raise ValueError(f"costs (tokens per job) must be positive ints for every owner with rows, got {bad}")
    return costs


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _checked_weights(weights: Mapping[int, int]) -> Mapping[int, int]:
    bad = {owner: w for owner, w in weights.items() if not isinstance(w, int) or isinstance(w, bool) or w < 1}
    if bad:
        raise ValueError(f"owner weights must be positive ints, got {bad}")
    return weights


def _mapping(value: object) -> Mapping[str, object]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a mapping, got {value!r}")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an int, got {value!r}")
    return value
