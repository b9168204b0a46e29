"""Approved drafts to `send`: no LLM, no LLM budget; owner limits and, when configured, the
send rate (`send_flow`), shared among owners by the pure selection (`select_sends`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from orchestrator.budget import Budget
from orchestrator.dispatch import reads, send_flow
from orchestrator.dispatch.cycle.cursor_state import json_cursor_load
from orchestrator.dispatch.cycle.enqueue import SEND_TASK, tasks_enqueue_on_commit
from orchestrator.dispatch.selection import select_sends
from orchestrator.dispatch.singleton import Lease
from outreach.models import State
from outreach.tiers import Tier
from outreach.transitions import transition_many

# Apart from the LLM cursor (cursor_state.CURSOR_KEY): sends take turns among the owners with approved drafts, the LLM
# slots among those with queued work; one cursor would let either round skip owners of the other.
SEND_CURSOR_KEY = "orchestrator:dispatch:send_cursor"


def approved_dispatch(
    *,
    room: Mapping[int, int],
    approved: Mapping[int, int],
    weights: Mapping[int, int],
    now: datetime,
    budget: Budget,
    paused_tiers: Mapping[int, frozenset[Tier]],
    lease: Lease,
) -> list[int]:
    """Approved drafts go to `send` under owner limits (`room`: what each owner may send now)
    and, when configured, the send rate (send_flow: a cycle's worth, shared by owner weight in
    `select_sends`' round robin, which goes on from the send cursor); no LLM call, no LLM
    budget. `approved`: each owner's approved drafts as the cycle read them
    (reads.CommittedWork.approved): only those owners' are read (at 10,000 owners a cycle's
    room holds hundreds of owners, and a probe each cost ~1 ms where none had a draft)."""
    slots = send_flow.approved_slots(budget=budget)
    most = {o: min(n, approved[o]) for o, n in room.items() if o in approved}
    if slots is not None:  # a cycle's worth of the send rate at most, any owner
        most = {o: min(n, slots) for o, n in most.items()}
    found = reads.approved_candidates(k_by_owner=most, now=now, paused_tiers=paused_tiers)
    ids = [i for per_owner in found.values() for i in per_owner]
    if slots is not None:
        cursor = json_cursor_load(lease.client, SEND_CURSOR_KEY)
        ids = list(select_sends(found, slots=slots, cursor=cursor, weights=weights).outreach_ids)
    # The move commits on its own (no transaction around it: its own would be a savepoint),
    # and the tasks are published once it has.
    claimed = transition_many(
        outreach_ids=ids, from_=State.APPROVED, to=State.DISPATCHED, note="send", blocked_reason="", at=now
    )
    tasks_enqueue_on_commit(SEND_TASK, claimed)
    if slots is not None:
        # The round moves by the sends that went: a draft another process took between the read
        # and the claim (cancelled, sent by hand) costs its owner no turn, as for the LLM picks.
        went = set(claimed)
        sent = select_sends(
            {o: [i for i in per_owner if i in went] for o, per_owner in found.items()},
            slots=len(went),
            cursor=cursor,
            weights=weights,
        )
        lease.set_if_held(SEND_CURSOR_KEY, sent.cursor.to_json())
        handed = set(ids)
        send_flow.waiting_label(ids=[i for o in found.values() for i in o if i not in handed], budget=budget)
    return claimed
