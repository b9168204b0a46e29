"""The selection's values: what the shell offers (`Candidate`), what it gets back (`Pick`,
`Selection`, `SendSelection`), and the starvation guard's shares. Frozen, so a selection is a value
the tests compare whole."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import NamedTuple

from orchestrator.dispatch.selection.cursor import Cursor
from outreach.tiers import Tier

TOP_TIER = min(Tier)


class OwnerIds(frozenset[int]):
    """Owner ids as a set that also holds them in id order (`ordered`): made once where a set
    of owners is kept (the active owners, a budget group's: orchestrator.dispatch.reads), so a
    round order over them (`schedule.round_order`) neither sorts nor hashes thousands of ids
    again every cycle (its two rounds at 10,000 owners, 2.7 -> 1.5 ms of the window's on a slow
    evening, alternating cycles in one process, 2026-12-07, session 41)."""

    __slots__ = ("ordered",)
    ordered: tuple[int, ...]

    def __new__(cls, ids: Iterable[int]) -> OwnerIds:
        self = super().__new__(cls, ids)
        self.ordered = tuple(sorted(self))
        return self


class Candidate(NamedTuple):
    """One queued outreach row, as the shell loaded it for this cycle. A tuple, not a frozen
    dataclass (whose __init__ sets each field through object.__setattr__): a cycle makes one for
    each row it loads, two for each of the 627 owners of a 10,000-owner window."""

    outreach_id: int
    owner_id: int
    tier: Tier


class Pick(NamedTuple):
    """A candidate chosen to run this cycle; `reason` is for logs (e.g. "backfill tier=intro
    round=1"). A tuple, as `Candidate`: one a slot."""

    outreach_id: int
    owner_id: int
    tier: Tier
    reason: str


Candidates = Mapping[Tier, Mapping[int, Sequence[Candidate]]]


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
class Window:
    """The owners a windowed cycle left out of the candidates, where each round would first meet
    them: per round, `(tier, "")` the tier's own and `(tier, group)` a budget group's, the first
    owner left out as (its first tag, its id), in the order `RoundOrder` gives. A round not named
    left nobody out. With it, `select_batch` says whether its picks are exactly those it would
    make with every owner left out back in (`Selection.exact`)."""

    left_out: Mapping[tuple[Tier, str], tuple[Fraction, int]] = field(default_factory=dict)
    # The budget groups of every owner left out (None: some may be in none): a round that runs
    # out of rows once all of these groups' slots are spent would meet the owners left out only
    # to pass them over (a spent group leaves the round), so its picks are exact all the same.
    left_out_groups: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Selection:
    """The picks in dispatch order (tier by tier, schedule order within a tier) and the cursor to
    persist. `exact`: False when a `Window` left out an owner the schedule would have reached, so
    the shell must load more owners and select again (always True without a window). `reached`:
    how many of each owner's rows in each tier the schedule took, in whichever of its runs took
    the most (with a starvation guard, the run without it that names the guard's picks): what a
    loading that gave an owner fewer rows than it has must check (`sizing.ran_dry`)."""

    picks: tuple[Pick, ...]
    cursor: Cursor
    exact: bool = True
    reached: Mapping[tuple[Tier, int], int] = field(default_factory=dict, compare=False)

    def count(self, tier: Tier) -> int:
        return sum(1 for pick in self.picks if pick.tier == tier)


@dataclass(frozen=True, slots=True)
class SendSelection:
    """Approved drafts to hand to `send` this cycle, in schedule order, and the send cursor to persist."""

    outreach_ids: tuple[int, ...]
    cursor: Cursor
