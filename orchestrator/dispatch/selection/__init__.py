"""Which queued outreach may run this cycle: the dispatcher's pure selection policy.

The dispatch shell loads each tier's per-owner top-k candidates (k from `rows_per_owner`), calls
`select_batch`, then checks owner capacity, reserves budget, claims and enqueues the picks and persists
the returned cursor (`Cursor.to_json`). Nothing here touches the ORM, Redis, the clock or randomness,
so the policy is property-tested on its own (tests/orchestrator/dispatch/test_selection.py).

Policy:
1. Slots per tier: reply, then intro, then nudge (strict priority); slots a tier cannot use are
   backfilled from the next tier's rows already loaded, so min(slots, candidates) picks are made.
   An optional `StarvationGuard` first reserves a minimum share of the slots for lower tiers with work.
2. Within a tier: weighted round robin across owners, continuing from the persisted cursor
   (`schedule._TierRound`), so no owner monopolises a tier however deep its backlog.
3. Fairness in tokens (`costs` given, DISPATCH_FAIRNESS=tokens): an owner's place in the round moves
   by what its picks cost (estimated tokens / weight) instead of by one pick, start-time fair
   queueing on the same virtual clock, each owner's lead carried in the cursor; so equal-weight owners
   get equal token shares, an owner whose jobs cost 3x taking a third of the picks.
4. Budget groups (an organization with its own LLM cap): a group's owners together take at most
   its `group_slots` this cycle, shared by the group's own round robin (also in the cursor); once
   the group is spent its owners leave the round and the others get those slots (backfill).
5. Approved sends under a send rate (`select_sends`): the same weighted round robin, in counts,
   over the owners' approved drafts as one round, from a cursor of their own.
A round costs O(slots * log(owners) + owners): nothing here grows with queue depth.

Modules, one role each: `values` (candidates, picks, selections, the starvation guard), `cursor`
(where the schedule stopped, and its JSON), `schedule` (the virtual clock and the rounds),
`batch` (`select_batch`, `select_sends`), `sizing` (`rows_per_owner`, `rows_to_load`: how many
rows the shell loads; `rows_loaded`, `ran_dry`: a guess first, loaded whole where it ran dry), `checks` (input checks). Import from the package.
"""

from __future__ import annotations

from orchestrator.dispatch.selection.batch import select_batch, select_sends
from orchestrator.dispatch.selection.cursor import Cursor, Leads, Position
from orchestrator.dispatch.selection.schedule import TOKEN_UNIT, RoundOrder, round_order
from orchestrator.dispatch.selection.sizing import Loaded, ran_dry, rows_loaded, rows_per_owner, rows_to_load
from orchestrator.dispatch.selection.values import (
    TOP_TIER,
    Candidate,
    Candidates,
    OwnerIds,
    Pick,
    Selection,
    SendSelection,
    StarvationGuard,
    Window,
)

__all__ = [
    "TOKEN_UNIT",
    "TOP_TIER",
    "Candidate",
    "Candidates",
    "Cursor",
    "Leads",
    "Loaded",
    "OwnerIds",
    "Pick",
    "Position",
    "RoundOrder",
    "Selection",
    "SendSelection",
    "StarvationGuard",
    "Window",
    "ran_dry",
    "round_order",
    "rows_loaded",
    "rows_per_owner",
    "rows_to_load",
    "select_batch",
    "select_sends",
]
