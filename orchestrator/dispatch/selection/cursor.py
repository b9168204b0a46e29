"""Where the schedule stopped (`Position`, `Cursor`), and the cursor's JSON: the shell persists it
in Redis between cycles, so reading it back rejects anything that is not one (`from_json`)."""

from __future__ import annotations

import bisect
import json
import math
import weakref
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from itertools import chain

from outreach.tiers import Tier


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


def scaled(value: Fraction, scale: int) -> int:
    """`value` in units of 1 / `scale` (a multiple of its denominator)."""
    return value.numerator * (scale // value.denominator)


@dataclass(frozen=True, slots=True, weakref_slot=True, eq=False)
class Leads:
    """One round's leads: per owner, how far its next tag lies ahead, in units of 1 / `scale`.

    Exact ints, as the schedule's clock keeps its tags: a round may hold one lead per owner
    (thousands at platform scale), and as Fractions they were made, scaled, compared and
    written as text again by every clock of every cycle. Kept over the scale they were made in
    (the clock's: `schedule._Clock.leads_after`), so the next cycle's clock, over the same
    scale while the weights stand, takes them as they are; equal leads compare equal whatever
    their scale.

    `since`, when the clock made these leads from others over the same scale and frame: those
    (weakly: no chain of cycles kept alive), the owners whose lead it set and those it dropped.
    Not part of the value; it lets the dispatcher write only what changed (cycle.cursor_state)
    without comparing every lead, and rank these leads from those (`ranked`).
    """

    scale: int = 1
    ticks: Mapping[int, int] = field(default_factory=dict)
    since: LeadsChange | None = field(default=None, repr=False)
    _ranked: list[tuple[int, int]] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # Leads made from others (`since`, those alive) are those, checked when they were made,
        # less the dropped, with the changed set: only the changed are new.
        since = self.since
        base = since.base() if since is not None else None
        new = since.changed.values() if since is not None and base is not None else self.ticks.values()
        if self.scale <= 0 or (new and min(new) <= 0):
            raise ValueError(
                "a cursor holds one positive lead per tier, group and owner, over a positive scale"
            )
        if since is not None and base is not None and base._ranked is not None:
            object.__setattr__(self, "_ranked", _ranked_from(base, since))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Leads):
            return NotImplemented
        if self.scale == other.scale:
            return self.ticks == other.ticks
        theirs = other.ticks
        return self.ticks.keys() == theirs.keys() and all(
            n * other.scale == theirs[o] * self.scale for o, n in self.ticks.items()
        )

    __hash__ = None  # type: ignore[assignment]

    def ranked(self) -> Sequence[tuple[int, int]]:
        """(lead, owner) of every owner, ascending: the order in which the owners ahead come
        up in the round (`schedule._Clock.tokens_order`), and the first of them the ones its
        next pick passes (`leads_after`). Sorted the first time it is asked for; leads made
        from ranked ones (`since`, while those are alive: as they are made) are ranked from
        theirs, in about linear time and C's: a cycle moves some hundreds of leads among
        thousands, and sorting every owner's again was the cycle's largest cost that grew
        with the active owners (bench/dispatch.py, 2026-12-06)."""
        if self._ranked is None:
            object.__setattr__(
                self, "_ranked", sorted(zip(self.ticks.values(), self.ticks.keys(), strict=True))
            )
        return self._ranked  # type: ignore[return-value]

    @classmethod
    def of(cls, leads: Mapping[int, Fraction]) -> Leads:
        """From exact leads (Fractions or ints), over their least common denominator."""
        exact = {owner: Fraction(lead) for owner, lead in leads.items()}
        scale = math.lcm(*{lead.denominator for lead in exact.values()}) if exact else 1
        return cls(scale, {o: scaled(lead, scale) for o, lead in exact.items()})

    def fractions(self) -> dict[int, Fraction]:
        return {owner: Fraction(n, self.scale) for owner, n in self.ticks.items()}


@dataclass(frozen=True, slots=True)
class LeadsChange:
    """How one round's leads were made from others (`Leads.since`)."""

    base: weakref.ref[Leads]
    changed: Mapping[int, int]  # owner -> its new lead
    dropped: frozenset[int]


def _ranked_from(base: Leads, change: LeadsChange) -> list[tuple[int, int]]:
    """The ranking (`Leads.ranked`) of `base`'s leads with `change` made to them, from
    `base`'s: the owners the change dropped or moved are mostly `base`'s first (a round's
    picks pass the leads in order), cut off together; any others are found by bisection; the
    moved ones' new leads are put in at their places, found by bisection too. No comparison
    of every lead: at 40,000 owners a cycle's leads hold a few thousand distinct values, and
    C's sort of the ranking with the new leads appended took 3-14 ms a round."""
    ranked = base._ranked
    assert ranked is not None
    gone = change.dropped | change.changed.keys()
    cut = 0
    for _, owner in ranked:
        if owner not in gone:
            break
        cut += 1
    source, at = ranked, cut
    if len(gone & base.ticks.keys()) > cut:  # some went from further on
        source, at = ranked[cut:], 0
        edge, ticks = source[0], base.ticks
        for owner in gone:
            if (lead := ticks.get(owner)) is not None and (lead, owner) > edge:
                del source[bisect.bisect_left(source, (lead, owner))]
    merged: list[tuple[int, int]] = []
    for moved in sorted(zip(change.changed.values(), change.changed.keys(), strict=True)):
        place = bisect.bisect_left(source, moved, at)
        merged += source[at:place]
        merged.append(moved)
        at = place
    merged += source[at:]
    return merged


@dataclass(frozen=True, slots=True)
class Cursor:
    """Per tier, the schedule position of the last pick; the next cycle starts strictly after it.

    `groups` holds, per tier and budget group, where the group's own round robin stopped (the last
    of its owners served there), so its few slots rotate among its owners from cycle to cycle.
    `Cursor()` starts every tier at the lowest owner id. Persist with `to_json()` / `from_json()`;
    a tier without a position (never served) is simply absent from the JSON.

    `leads` (fairness in tokens only): per tier and group ("" for the tier's own round), the
    owners whose next tag lies ahead of the position, with that tag in the position's frame (the
    position's phase plus what they are ahead by): an owner that just took a costly job waits its
    turn across cycles. Owners at or behind the clock are absent (they start at the position).
    """

    positions: tuple[tuple[Tier, Position], ...] = ()
    groups: tuple[tuple[Tier, str, Position], ...] = ()
    leads: Mapping[tuple[Tier, str], Leads] = field(default_factory=dict)
    # `positions` and `groups` by key, for `position`: a schedule asks for each group's, and with
    # a scan of `groups` for each, `schedule_run` took 23.4 ms a cycle at 1,000 capped
    # organizations, 12.3 with these (bench/dispatch.py --organizations 1000, 2026-12-07)
    _by_tier: dict[Tier, Position] = field(init=False, repr=False, compare=False)
    _by_group: dict[tuple[Tier, str], Position] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_tier = {Tier(tier): position for tier, position in self.positions}
        if len(by_tier) != len(self.positions):
            raise ValueError("a cursor holds one position per tier")
        by_group = {(Tier(tier), group): position for tier, group, position in self.groups}
        if len(by_group) != len(self.groups) or any(tier not in by_tier for tier, _ in by_group):
            raise ValueError("a cursor holds one position per tier and group, in tiers it has served")
        object.__setattr__(self, "_by_tier", by_tier)
        object.__setattr__(self, "_by_group", by_group)
        object.__setattr__(self, "positions", tuple(sorted(by_tier.items())))
        object.__setattr__(self, "groups", tuple((t, g, p) for (t, g), p in sorted(by_group.items())))
        leads = {(Tier(t), g): by_owner for (t, g), by_owner in self.leads.items() if by_owner.ticks}
        if any(t not in by_tier for t, _ in leads):
            raise ValueError("a cursor holds leads only in tiers it has served")
        object.__setattr__(self, "leads", leads)

    def position(self, tier: Tier, group: str | None = None) -> Position | None:
        if group is not None:
            return self._by_group.get((tier, group))
        return self._by_tier.get(tier)

    def leads_of(self, tier: Tier, group: str = "") -> Leads:
        return self.leads.get((tier, group), _NO_LEADS)

    def moved(self, moves: Mapping[Tier, Move]) -> Cursor:
        """Where each tier's schedule stopped, in one new cursor. A move replaces its tier's
        position, its groups' positions and the leads of the rounds it names ("" the tier's,
        else a group's); a tier whose move has no position stays where it was."""
        moves = {tier: move for tier, move in moves.items() if move.position is not None}
        if not moves:
            return self
        new_groups = {(t, g): p for t, m in moves.items() for g, p in m.groups.items()}
        return Cursor(
            positions=(
                *((t, p) for t, p in self.positions if t not in moves),
                *((t, m.position) for t, m in moves.items() if m.position is not None),
            ),
            groups=(
                *((t, g, p) for t, g, p in self.groups if (t, g) not in new_groups),
                *((t, g, p) for (t, g), p in new_groups.items()),
            ),
            leads={**self.leads, **{(t, g): leads for t, m in moves.items() for g, leads in m.leads.items()}},
        )

    def keeping_groups(self, groups: Collection[str]) -> Cursor:
        """Only the positions of these groups (the shell drops organizations no longer capped)."""
        if all(g in groups for _, g, _ in self.groups) and all(g == "" or g in groups for _, g in self.leads):
            return self
        return Cursor(
            positions=self.positions,
            groups=tuple(x for x in self.groups if x[1] in groups),
            leads={(t, g): leads for (t, g), leads in self.leads.items() if g == "" or g in groups},
        )

    def as_dict(self, *, owners: bool = True) -> dict[str, dict[str, object]]:
        """`owners=False`: each round's leads as their scale and count only, without the owners'
        (the dispatcher keeps those apart: cycle.cursor_state)."""
        result: dict[str, dict[str, object]] = {
            tier.name.lower(): _pos_dict(pos) for tier, pos in self.positions
        }
        for tier, group, pos in self.groups:
            by_group = result[tier.name.lower()].setdefault("groups", {})
            assert isinstance(by_group, dict)
            by_group[group] = _pos_dict(pos)
        # Round by round: its scale, then owner and lead pairs in one flat list of ints (up to
        # one pair per owner: no key made text, nothing sorted).
        for (tier, group), leads in self.leads.items():
            by_round = result[tier.name.lower()].setdefault("leads", {})
            assert isinstance(by_round, dict)
            by_round[group] = (
                {"scale": leads.scale, "owners": list(chain.from_iterable(leads.ticks.items()))}
                if owners
                else {"scale": leads.scale, "count": len(leads.ticks)}
            )
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
            leads = {
                (Tier[name.upper()], _str(group)): _leads(by_owner)
                for name, pos in data.items()
                for group, by_owner in _mapping(pos.get("leads", {})).items()
            }
        except (KeyError, TypeError, AttributeError, ZeroDivisionError) as exc:
            raise ValueError(f"not a selection cursor: {data!r}") from exc
        return cls(positions=positions, groups=groups, leads=leads)

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)  # few keys: the leads are a list

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
class Move:
    """Where one tier's schedule stopped in a selection (`Cursor.moved`): its position,
    its groups' positions, and the leads of the rounds it names ("" the tier's, else a group's)."""

    position: Position | None
    groups: Mapping[str, Position] = field(default_factory=dict)
    leads: Mapping[str, Leads] = field(default_factory=dict)


_NO_LEADS = Leads()


def _pos_dict(pos: Position) -> dict[str, object]:
    return {"owner_id": pos.owner_id, "phase": str(pos.phase)}


def _position(data: object) -> Position:
    pos = _mapping(data)
    return Position(owner_id=_int(pos["owner_id"]), phase=Fraction(str(pos["phase"])))


def _leads(data: object) -> Leads:
    """A round's leads as `as_dict` writes them, or as written before 2026-12-05: owner -> "n/d"."""
    by_round = _mapping(data)
    if "scale" in by_round:
        flat = by_round["owners"]
        if not isinstance(flat, list) or len(flat) % 2 or not all(type(x) is int for x in flat):
            raise TypeError(f"expected owner and lead ints, got {flat!r}")
        ticks = dict(zip(flat[::2], flat[1::2], strict=True))
        if len(ticks) * 2 != len(flat):
            raise ValueError("a cursor holds one lead per tier, group and owner")
        return Leads(_int(by_round["scale"]), ticks)
    return Leads.of({int(owner): Fraction(_str(lead)) for owner, lead in by_round.items()})


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
