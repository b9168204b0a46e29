"""Inbound replies per triage class (outreach.models.triage.ReplyClass): how many came in, how
many of their answers wait for a person, and how people decided them.

Definitions, per class (the class the reply has now: a person's reclassification counts under
the new one):
- received: reply outreach created in the window (a prospect's turn; messages that joined a
  pending reply are part of it, not a turn of their own);
- awaiting: reply drafts awaiting approval now;
- approved, rejected: reply drafts decided in the window (the history's moves out of
  AWAITING_APPROVAL, as the overall approval rate counts them: activity.APPROVED/REJECTED);
- approval rate: approved / (approved + rejected) (figures.ratio; None with no decision).
Every class is listed, zeros included: a fixed set of codes (the /metrics labels are these
codes, never names or text). A reply not triaged yet (empty class) is in no row.

For the dashboard and `queue_stats`; /metrics serves `awaiting` only (replies_awaiting), and
counts the rest as counters (outreach.counters: replies classified, reply drafts decided).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, QuerySet

from orchestrator.figures import ratio
from orchestrator.metrics.activity import APPROVED, REJECTED, window_events
from orchestrator.metrics.sql import first_id_since, for_organizations
from outreach.models import Outreach, ReplyClass, State


@dataclass(frozen=True)
class ReplyClassFigures:
    reply_class: str  # a ReplyClass code
    label: str
    received: int
    awaiting: int
    approved: int
    rejected: int

    @property
    def approval_rate(self) -> float | None:
        return ratio(self.approved, self.approved + self.rejected)


def reply_classes(
    *, since: datetime, organization_ids: Collection[int] | None = None
) -> list[ReplyClassFigures]:
    """Every class's figures (the module docstring), of those organizations' owners' replies."""
    replies = for_organizations(
        Outreach.objects.filter(kind=Outreach.Kind.REPLY).exclude(reply_class="").order_by(),
        organization_ids=organization_ids,
    )
    # created_at grows with the id: the window is a primary-key range (sql.first_id_since).
    boundary = first_id_since(model=Outreach, column="created_at", since=since)
    received = _by_class(replies.filter(id__gt=boundary, created_at__gte=since), "reply_class")
    awaiting = replies_awaiting(organization_ids=organization_ids)
    events = for_organizations(
        window_events(since=since).filter(outreach__kind=Outreach.Kind.REPLY),
        organization_ids=organization_ids,
        path="outreach__owner__organization_id",
    )
    approved = _by_class(events.filter(APPROVED), "outreach__reply_class")
    rejected = _by_class(events.filter(REJECTED), "outreach__reply_class")
    return [
        ReplyClassFigures(
            reply_class=code,
            label=str(label),
            received=received.get(code, 0),
            awaiting=awaiting.get(code, 0),
            approved=approved.get(code, 0),
            rejected=rejected.get(code, 0),
        )
        for code, label in ReplyClass.choices
    ]


def replies_awaiting(*, organization_ids: Collection[int] | None = None) -> dict[str, int]:
    """Reply drafts awaiting approval now, per class, every class listed (zeros included): the
    one figure of this module /metrics serves (a gauge of now; the others are windows, which
    /metrics leaves to PromQL over outreach.counters' per-class counters)."""
    replies = for_organizations(
        Outreach.objects.filter(kind=Outreach.Kind.REPLY, state=State.AWAITING_APPROVAL)
        .exclude(reply_class="")
        .order_by(),
        organization_ids=organization_ids,
    )
    found = _by_class(replies, "reply_class")
    return {code: found.get(code, 0) for code in ReplyClass.values}


def _by_class(rows: QuerySet[Any], column: str) -> dict[str, int]:
    counted = rows.values(column).annotate(n=Count("id"))
    return {row[column]: row["n"] for row in counted}
