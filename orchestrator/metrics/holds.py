"""Work held or dropped by people: every active pause, and the drafts rejected in the window
counted by reason (docs/operators.md). Shown on the dashboard and by `queue_stats`.

Pauses: a handful of rows on a partial index (orchestrator.controls.pauses.active). Rejections: the
window's REJECTED events (a primary-key range, as every window figure in activity.py), grouped
by the reason kept on the outreach.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count

from orchestrator.controls import pauses
from orchestrator.metrics.activity import REJECTED, window_events


@dataclass(frozen=True)
class ActivePause:
    pause_id: int
    scope: str
    organization: str  # "" for a pause of every organization
    created_by: str  # "" when set by an automatic rule
    created_at: datetime
    reason: str
    source: str


@dataclass(frozen=True)
class RejectionReason:
    reason: str  # "" when the reviewer gave none
    drafts: int


def active_pauses(*, organization_ids: Collection[int] | None = None) -> list[ActivePause]:
    """Oldest first. With `organization_ids`, those organizations' pauses and the global ones
    (those stop their work too)."""
    return [
        ActivePause(
            pause_id=p.pk,
            scope=p.scope_text(),
            organization=p.organization.name if p.organization is not None else "",
            created_by=str(p.created_by) if p.created_by is not None else "",
            created_at=p.created_at,
            reason=p.reason,
            source=p.source,
        )
        for p in pauses.active()
        if organization_ids is None or p.organization_id is None or p.organization_id in organization_ids
    ]


def rejections_by_reason(
    *, since: datetime, organization_ids: Collection[int] | None = None
) -> list[RejectionReason]:
    """Drafts rejected since `since`, per reason, most first (with `organization_ids`, only
    theirs: a reviewer's words are their organization's)."""
    events = window_events(since=since).filter(REJECTED)
    if organization_ids is not None:
        events = events.filter(outreach__owner__organization_id__in=organization_ids)
    rows = (
        events.values("outreach__rejected_reason")
        .annotate(drafts=Count("id"))
        .order_by("-drafts", "outreach__rejected_reason")
    )
    return [RejectionReason(r["outreach__rejected_reason"], r["drafts"]) for r in rows]
