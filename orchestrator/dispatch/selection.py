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
   (`_schedule`), so no owner monopolises a tier however deep its backlog.
A round costs O(slots * log(owners) + owners): nothing here grows with queue depth.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Mapping, Sequence
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

    `Cursor()` starts every tier at the lowest owner id. Persist with `to_json()` / `from_json()`;
    a tier without a position (never served) is simply absent from the JSON.
    """

    positions: tuple[tuple[Tier, Position], ...] = ()

    def __post_init__(self) -> None:
        by_tier = {Tier(tier): position for tier, position in self.positions}
        if len(by_tier) != len(self.positions):
            raise ValueError("a cursor holds one position per tier")
        object.__setattr__(self, "positions", tuple(sorted(by_tier.items())))

    def position(self, tier: Tier) -> Position | None:
        return dict(self.positions).get(tier)

    def moved(self, *, tier: Tier, position: Position | None) -> Cursor:
        if position is None:
            return self
        return Cursor(positions=(*((t, p) for t, p in self.positions if t != tier), (tier, position)))

    def as_dict(self) -> dict[str, dict[str, int | str]]:
        return {
            tier.name.lower(): {"owner_id": pos.owner_id, "phase": str(pos.phase)}
            for tier, pos in self.positions
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Mapping[str, object]]) -> Cursor:
        """Inverse of `as_dict`; raises ValueError on anything else (the shell may then use `Cursor()`)."""
        try:
            positions = tuple(
                (
                    Tier[name.upper()],
                    Position(owner_id=_int(pos["owner_id"]), phase=Fraction(str(pos["phase"]))),
                )
                for name, pos in data.items()
            )
        except (KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
            raise ValueError(f"not a selection cursor: {data!r}") from exc
        return cls(positions=positions)

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
) -> Selection:
    """Choose up to `slots` candidates: tiers by priority with backfill, owners by weighted round robin.

    `candidates[tier][owner_id]` is that owner's rows in its own order (oldest ready first), possibly
    truncated to k rows (see `rows_per_owner`). `weights[owner_id]` is a positive int, default 1.

    Fairness invariant: within a tier, no context gets a second slot while another eligible context
    has none. Rounds start right after the cursor, so a cycle's per-owner counts in a tier differ by
    at most one among owners that still have rows. With weights it generalises to: in a round an owner
    of weight w gets w slots, interleaved, and over any stretch of the schedule (one cycle or many)
    there is a share D such that every owner that still has rows got D * w slots give or take one.

    Tier invariant (guard off): no intro is picked while an eligible reply is unpicked, and no nudge
    while an intro is. All slots are used when eligible work exists: min(slots, candidates) picks.
    """
    if slots < 0:
        raise ValueError(f"slots must be >= 0, got {slots}")
    weights = _checked_weights(weights or {})
    available = _available(candidates)
    counts = _allocate(available=available, slots=slots, guard=starvation_guard)
    strict = _allocate(available=available, slots=slots, guard=None)
    picks: list[Pick] = []
    new_cursor = cursor
    for tier in sorted(Tier):
        chosen, position = _schedule(
            rows_by_owner=candidates.get(tier, {}),
            count=counts[tier],
            start=cursor.position(tier),
            weights=weights,
        )
        # Picks beyond what strict priority would give this tier exist only because of the guard.
        picks.extend(
            _pick(row, nth=nth, weight=weights.get(row.owner_id, 1), guard=i >= strict[tier])
            for i, (row, nth) in enumerate(chosen)
        )
        new_cursor = new_cursor.moved(tier=tier, position=position)
    return Selection(picks=tuple(picks), cursor=new_cursor)


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


def _schedule(
    *,
    rows_by_owner: Mapping[int, Sequence[Candidate]],
    count: int,
    start: Position | None,
    weights: Mapping[int, int],
) -> tuple[list[tuple[Candidate, int]], Position | None]:
    """Up to `count` rows of one tier in round-robin order, each with its owner's ordinal; the new position.

    Owner o of weight w has service tags k/w (k = 0, 1, ...) on a virtual clock whose unit is a round;
    rows go in (tag, owner_id) order, so a round serves each owner w times, interleaved, and an
    unweighted round is one row per owner in owner-id order. Tags start strictly after the cursor
    position (phase, owner_id): unweighted, that is the first owner id above the last one served,
    wrapping around. An owner whose rows run out leaves the round; the others carry on.
    """
    heap = [
        (_first_tag(start=start, owner_id=owner_id, weight=weights.get(owner_id, 1)), owner_id)
        for owner_id, rows in rows_by_owner.items()
        if rows
    ]
    heapq.heapify(heap)  # O(owners); then O(log owners) per pick
    taken: dict[int, int] = {}
    chosen: list[tuple[Candidate, int]] = []
    position = start
    while heap and len(chosen) < count:
        tag, owner_id = heapq.heappop(heap)
        rows, nth = rows_by_owner[owner_id], taken.get(owner_id, 0) + 1
        chosen.append((rows[nth - 1], nth))
        taken[owner_id] = nth
        position = Position(owner_id=owner_id, phase=tag - math.floor(tag))
        if nth < len(rows):
            heapq.heappush(heap, (tag + Fraction(1, weights.get(owner_id, 1)), owner_id))
    return chosen, position


def _first_tag(*, start: Position | None, owner_id: int, weight: int) -> Fraction:
    """The owner's first tag k/weight whose (tag, owner_id) comes strictly after the cursor position."""
    if start is None:
        return Fraction(0)
    k = math.ceil(start.phase * weight)
    if Fraction(k, weight) == start.phase and owner_id <= start.owner_id:
        k += 1  # same tag as the last pick: owners up to it were served in this round already
    return Fraction(k, weight)


def _allocate(*, available: Mapping[Tier, int], slots: int, guard: StarvationGuard | None) -> dict[Tier, int]:
    """Slots per tier: guard reservations first (tier order), then strict priority fills the rest."""
    counts = dict.fromkeys(Tier, 0)
    left = slots
    for tier in sorted(Tier):
        reserve = guard.reserved(tier=tier, slots=slots) if guard is not None else 0
        counts[tier] = min(reserve, available[tier], left)
        left -= counts[tier]
    for tier in sorted(Tier):
        extra = min(available[tier] - counts[tier], left)
        counts[tier] += extra
        left -= extra
    return counts


def _pick(row: Candidate, *, nth: int, weight: int, guard: bool) -> Pick:
    """`nth` is the owner's ordinal in this tier this cycle; round = ceil(nth / weight)."""
    prefix = "guard " if guard else "" if row.tier == TOP_TIER else "backfill "
    suffix = f" weight={weight}" if weight != 1 else ""
    reason = f"{prefix}tier={row.tier.name.lower()} round={-(-nth // weight)}{suffix}"
    return Pick(outreach_id=row.outreach_id, owner_id=row.owner_id, tier=row.tier, reason=reason)


def _available(candidates: Candidates) -> dict[Tier, int]:
    """Rows per tier; rejects rows filed under the wrong tier or owner and duplicates (shell bugs)."""
    seen: set[int] = set()
    available = dict.fromkeys(Tier, 0)
    for tier, by_owner in candidates.items():
        for owner_id, rows in by_owner.items():
            for row in rows:
                if row.tier != tier or row.owner_id != owner_id or row.outreach_id in seen:
                    raise ValueError(
                        f"candidate {row} misfiled under tier={tier!r} owner={owner_id} or repeated"
                    )
                seen.add(row.outreach_id)
            available[Tier(tier)] += len(rows)
    return available


def _checked_weights(weights: Mapping[int, int]) -> Mapping[int, int]:
    bad = {owner: w for owner, w in weights.items() if not isinstance(w, int) or isinstance(w, bool) or w < 1}
    if bad:
        raise ValueError(f"owner weights must be positive ints, got {bad}")
    return weights


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an int, got {value!r}")
    return value
