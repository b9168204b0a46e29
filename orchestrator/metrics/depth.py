"""Queue depth now: rows per state and tier, how long the oldest ready row has waited, and why
deferred work waits. Every query here reads an index that holds the queue, not the history.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Min, Q

from orchestrator.metrics.sql import for_organizations
from outreach.models import Outreach, State
from outreach.tiers import Tier

TIER_NAMES = {int(t): t.name.lower() for t in Tier}
# Each live state has a partial index in outreach/models/outreach.py; a query whose WHERE
# matches the index predicate exactly reads that index (the queue's size) instead of the table
# (history's).
LIVE_GROUPS: tuple[tuple[State, ...], ...] = (
    (State.APPROVED,),  # outreach_approved_by_owner
    (State.AWAITING_APPROVAL,),  # outreach_awaiting_by_owner
    (State.DISPATCHED, State.GENERATING, State.SENDING),  # outreach_in_flight_age
)
LIVE = (State.QUEUED, *(s for group in LIVE_GROUPS for s in group))
FINISHED = tuple(s for s in State if s not in LIVE)
# The dispatcher labels at most 50 head rows per deferred owner, so this covers 100 deferred
# owners exactly; past it the figures are a sample and say so (`truncated`).
DEFERRED_SCAN_LIMIT = 5_000


@dataclass(frozen=True)
class Depth:
    states: dict[str, int]
    tiers: dict[str, dict[str, int]]  # live states only: the queue per tier
    ready_by_tier: dict[str, int]
    oldest_ready_age_s: float | None
    oldest_ready_age_s_by_tier: dict[str, float | None]


@dataclass(frozen=True)
class DeferredReason:
    reason: str
    rows: int
    owners: int


# Why queued work waits, as /metrics labels it: the row's `blocked_reason` is text for people
# (a pause's says who paused and what they typed, a deployment's quotes the provider), and a
# label value must be one of a fixed set. (text prefix, code): the first prefix that matches
# decides; the texts are written by Pause.blocked_reason, controls.spend.spend_cap_reason, the
# dispatcher's LLM cap, dispatch.owner_limits, the send budget (budget.sends), the deployment
# breaker and nurture.sequence. A new kind of reason shows as "other" until it gets a row.
_REASON_PREFIXES: tuple[tuple[str, str], ...] = (
    ("paused ", "paused"),
    ("daily spend cap ", "spend_cap"),
    ("organization LLM cap reached", "llm_cap"),
    ("outside operating hours", "operating_hours"),
    ("daily limit ", "owner_daily_limit"),
    ("send rate ", "send_rate"),
    ("sender domain ", "sender_domain_day"),
    ("send budget unavailable", "send_budget_unavailable"),
    ("deployment '", "deployment"),
    ("waiting for step ", "sequence"),
)
DEFERRED_REASON_CODES: tuple[str, ...] = (*(code for _, code in _REASON_PREFIXES), "other")


def deferred_reason_code(reason: str) -> str:
    """The code of a waiting row's reason, one of DEFERRED_REASON_CODES."""
    return next((code for prefix, code in _REASON_PREFIXES if reason.startswith(prefix)), "other")


@dataclass(frozen=True)
class Deferred:
    rows: int
    truncated: bool
    reasons: list[DeferredReason] = field(default_factory=list)


def queue_depth(*, now: datetime, organization_ids: Collection[int] | None = None) -> Depth:
    """Counts of every state (all present, 0 when empty) and of live states per tier; with
    `organization_ids`, of those organizations' owners' rows only."""
    outreach = for_organizations(Outreach.objects.all(), organization_ids=organization_ids)
    states = dict.fromkeys(State.values, 0)
    tiers = {name: dict.fromkeys(map(str, LIVE), 0) for name in TIER_NAMES.values()}
    ready = dict.fromkeys(TIER_NAMES.values(), 0)
    oldest: dict[str, float | None] = dict.fromkeys(TIER_NAMES.values())
    # Ready and oldest ride on the QUEUED count: (tier, not_before) are in the ready index, so
    # PostgreSQL answers all three from an index-only scan of outreach_ready_by_owner_tier.
    queued = (
        outreach.filter(state=State.QUEUED)
        .values("tier")
        .annotate(
            n=Count("id"),
            ready=Count("id", filter=Q(not_before__lte=now)),
            oldest=Min("not_before", filter=Q(not_before__lte=now)),
        )
        .order_by()
    )
    for row in queued:
        name = TIER_NAMES[row["tier"]]
        tiers[name][State.QUEUED] = row["n"]
        states[State.QUEUED] += row["n"]
        ready[name] = row["ready"]
        oldest[name] = (now - row["oldest"]).total_seconds() if row["oldest"] else None
    for group in LIVE_GROUPS:
        rows = outreach.filter(state__in=group).values("state", "tier").annotate(n=Count("id"))
        for row in rows.order_by():
            tiers[TIER_NAMES[row["tier"]]][row["state"]] += row["n"]
            states[row["state"]] += row["n"]
    states |= finished_counts(organization_ids=organization_ids)
    ages = [age for age in oldest.values() if age is not None]
    return Depth(states, tiers, ready, max(ages) if ages else None, oldest)


def finished_counts(*, organization_ids: Collection[int] | None = None) -> dict[str, int]:
    """Rows in finished states (sent, rejected, cancelled, dead): what the history is made of.

    This is the one count that grows with history. It reads only `state` (COUNT(*), not a
    column), so PostgreSQL can answer it from a narrow index instead of the wide rows: SENT
    from an index-only scan of the partial outreach_sent_by_owner (600k sent rows: ~30 ms), the
    rest through outreach_lead_state. No tiers here: the per-tier figures are the queue's.
    """
    counts = dict.fromkeys(map(str, FINISHED), 0)
    outreach = for_organizations(Outreach.objects.all(), organization_ids=organization_ids)
    counts[State.SENT] = outreach.filter(state=State.SENT).count()
    others = [s for s in FINISHED if s != State.SENT]
    rows = outreach.filter(state__in=others).values("state").annotate(n=Count("*")).order_by()
    counts |= {row["state"]: row["n"] for row in rows}
    return counts


def deferred_work(*, organization_ids: Collection[int] | None = None) -> Deferred:
    """Queued rows the dispatcher labelled with why they wait, and approved drafts the send
    budget holds back (send rate, sender domain's day), grouped by that reason.

    Bounded by LIMIT: only the first DEFERRED_SCAN_LIMIT labelled rows are grouped (the inner
    query walks the ready index and stops there), so a queue of millions costs the same.
    """
    labelled = for_organizations(Outreach.objects.all(), organization_ids=organization_ids)
    labelled = labelled.filter(state__in=[State.QUEUED, State.APPROVED]).exclude(blocked_reason="")
    ids = labelled.order_by().values("id")[:DEFERRED_SCAN_LIMIT]
    grouped = (
        Outreach.objects.filter(id__in=ids)
        .values("blocked_reason")
        .annotate(rows=Count("id"), owners=Count("owner_id", distinct=True))
        .order_by("-rows", "blocked_reason")
    )
    reasons = [DeferredReason(r["blocked_reason"], r["rows"], r["owners"]) for r in grouped]
    rows = sum(r.rows for r in reasons)
    return Deferred(rows=rows, truncated=rows >= DEFERRED_SCAN_LIMIT, reasons=reasons)
