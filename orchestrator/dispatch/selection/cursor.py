"""Where the schedule stopped (`Position`, `Cursor`), and the cursor's JSON: the shell persists it
in Redis between cycles, so reading it back rejects anything that is not one (`from_json`)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

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
    # `leads` by round, (tier, group) -> owner -> lead: what the schedule reads (derived, so
    # not compared)
    _rounds: dict[tuple[Tier, str], dict[int, Fraction]] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        by_tier = {Tier(tier): position for tier, position in self.positions}
        if len(by_tier) != len(self.positions):
            raise ValueError("a cursor holds one position per tier")
        by_group = {(Tier(tier), group): position for tier, group, position in self.groups}
        if len(by_group) != len(self.groups) or any(tier not in by_tier for tier, _ in by_group):
            raise ValueError("a cursor holds one position per tier and group, in tiers it has served")
        object.__setattr__(self, "positions", tuple(sorted(by_tier.items())))
        object.__setattr__(self, "groups", tuple((t, g, p) for (t, g), p in sorted(by_group.items())))
        # Leads number up to one per owner of the tier (thousands at platform scale) and a cycle
        # builds several cursors: no Fraction or Tier is made again where one is given, and a
        # Fraction's sign is its numerator's (the denominator is positive).
        by_lead = {
            (t if type(t) is Tier else Tier(t), g, o): lead if type(lead) is Fraction else Fraction(lead)
            for t, g, o, lead in self.leads
        }
        if len(by_lead) != len(self.leads) or any(
            t not in by_tier or lead.numerator <= 0 for (t, _, _), lead in by_lead.items()
        ):
            raise ValueError(
                "a cursor holds one positive lead per tier, group and owner, in tiers it has served"
            )
        object.__setattr__(
            self, "leads", tuple((t, g, o, lead) for (t, g, o), lead in sorted(by_lead.items()))
        )
        for t, g, o, lead in self.leads:
            self._rounds.setdefault((t, g), {})[o] = lead

    def position(self, tier: Tier, group: str | None = None) -> Position | None:
        if group is not None:
            return next((p for t, g, p in self.groups if (t, g) == (tier, group)), None)
        return dict(self.positions).get(tier)

    def leads_of(self, tier: Tier, group: str = "") -> Mapping[int, Fraction]:
        return MappingProxyType(self._rounds.get((tier, group), {}))

    def moved(self, moves: Mapping[Tier, Move]) -> Cursor:
        """Where each tier's schedule stopped, in one new cursor (its leads are sorted once, and
        a cycle's may number one per owner). A move replaces its tier's position, its groups'
        positions and the leads of the rounds it names ("" the tier's, else a group's); a tier
        whose move has no position stays where it was."""
        moves = {tier: move for tier, move in moves.items() if move.position is not None}
        if not moves:
            return self
        new_groups = {(t, g): p for t, m in moves.items() for g, p in m.groups.items()}
        new_leads = {(t, g): by_owner for t, m in moves.items() for g, by_owner in m.leads.items()}
        moved = Cursor(
            positions=(
                *((t, p) for t, p in self.positions if t not in moves),
                *((t, m.position) for t, m in moves.items() if m.position is not None),
            ),
            groups=(
                *((t, g, p) for t, g, p in self.groups if (t, g) not in new_groups),
                *((t, g, p) for (t, g), p in new_groups.items()),
            ),
        )
        # The leads a selection computed are valid by construction (positive, in tiers it
        # served): sorted by owner round by round, not checked and sorted again as a whole
        # (up to one per owner: a third of a 10,000-owner cycle's cursor work).
        rounds = {
            key: dict(sorted(by_owner.items()))
            for key, by_owner in {**self._rounds, **new_leads}.items()
            if by_owner
        }
        object.__setattr__(
            moved,
            "leads",
            tuple((t, g, o, lead) for (t, g) in sorted(rounds) for o, lead in rounds[(t, g)].items()),
        )
        moved._rounds.update(rounds)
        return moved

    def keeping_groups(self, groups: Collection[str]) -> Cursor:
        """Only the positions of these groups (the shell drops organizations no longer capped)."""
        if all(g in groups for _, g, _ in self.groups) and all(
            g == "" or g in groups for _, g in self._rounds
        ):
            return self
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
        # Round by round, each name once: up to one lead per owner.
        for (tier, group), by_owner in self._rounds.items():
            by_round = result[tier.name.lower()].setdefault("leads", {})
            assert isinstance(by_round, dict)
            by_round[group] = {str(owner): str(lead) for owner, lead in by_owner.items()}
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
                (Tier[name.upper()], _str(group), int(owner), _fraction(_str(lead)))
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


@dataclass(frozen=True, slots=True)
class Move:
    """Where one tier's schedule stopped in a selection (`Cursor.moved`): its position,
    its groups' positions, and the leads of the rounds it names ("" the tier's, else a group's)."""

    position: Position | None
    groups: Mapping[str, Position] = field(default_factory=dict)
    leads: Mapping[str, Mapping[int, Fraction]] = field(default_factory=dict)


def _pos_dict(pos: Position) -> dict[str, object]:
    return {"owner_id": pos.owner_id, "phase": str(pos.phase)}


def _position(data: object) -> Position:
    pos = _mapping(data)
    return Position(owner_id=_int(pos["owner_id"]), phase=Fraction(str(pos["phase"])))


def _fraction(text: str) -> Fraction:
    """ "7/3" or "2" as a Fraction: parsed as two ints (Fraction's own parser is a regular
    expression, and a cursor carries up to one lead per owner)."""
    numerator, slash, denominator = text.partition("/")
    try:
        return Fraction(int(numerator), int(denominator)) if slash else Fraction(int(numerator))
    except ValueError:
        return Fraction(text)  # anything else Fraction reads ("0.5"), or its ValueError


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
