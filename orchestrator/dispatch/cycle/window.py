"""The cycle's window: which owners it judges and loads. Not every active owner, but those each
round meets first going on from the cursor (`round_order`: arithmetic on the cursor, weights and
leads, no rows), enough to fill the slots twice over, plus the owners whose committed work the
shared rooms count or whose approved drafts wait to be sent. The selection says whether its
picks are exactly those every owner would give (`Selection.exact`); when not, the window widens
and the cycle selects again, so the window changes what a cycle costs, never what it picks.

  owners with ready work, per tier (one index probe per owner)
  -> each tier's round, and each budget group's, in first-tag order -> the first `size` of each
  -> admission, costs, candidates and the batch over those owners only (`Window`: where the rest begin)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from orchestrator.dispatch.selection import Cursor, Window, round_order
from outreach.tiers import Tier

# The window holds this many times the cycle's slot bound in owners per round (at least
# WINDOW_MIN): an owner refused by admission, or whose room or rows run out, leaves the round,
# and the rest of the window fills its slots. Each widening multiplies it by WIDEN.
WINDOW_SLOTS, WINDOW_MIN, WIDEN = 2, 64, 4


@dataclass(frozen=True, slots=True)
class OwnersWindow:
    """The owners a cycle judges (`loaded`) and where those it left out begin (`window`)."""

    loaded: frozenset[int]
    window: Window
    complete: bool  # nobody with ready work was left out


def owners_window(
    *,
    ready: Mapping[Tier, Collection[int]],
    cursor: Cursor,
    weights: Mapping[int, int],
    groups: Mapping[int, str],
    tokens: bool,
    size: int,
    also: Collection[int] = (),
) -> OwnersWindow:
    """The first `size` owners with ready work of each tier's round and of each budget group's
    own round (`groups`: owner -> its capped organization's scope), in the order the round
    meets them from `cursor`, plus `also` (owners judged for other reasons)."""
    orders = {}
    for tier, owners in ready.items():
        orders[(tier, "")] = round_order(
            tier=tier, owners=owners, cursor=cursor, weights=weights, tokens=tokens
        )
        members: dict[str, list[int]] = {}
        for owner in owners:
            if owner in groups:
                members.setdefault(groups[owner], []).append(owner)
        for group, owners_of in members.items():
            orders[(tier, group)] = round_order(
                tier=tier, owners=owners_of, cursor=cursor, weights=weights, tokens=tokens, group=group
            )
    loaded = set(also)
    for order in orders.values():
        loaded.update(order.first(size))
    left_out = {
        name: first for name, order in orders.items() if (first := order.left_out(loaded)) is not None
    }
    return OwnersWindow(loaded=frozenset(loaded), window=Window(left_out=left_out), complete=not left_out)


def window_size(*, slot_bound: int) -> int:
    """The first window's owners per round for a cycle of at most `slot_bound` slots."""
    return max(WINDOW_MIN, WINDOW_SLOTS * slot_bound)
