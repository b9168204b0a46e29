"""Dead letters by failure class, with a few recent failed inputs (ids and reason) per class.

The DeadLetter table holds failures only and is indexed on (status, failure_class): the counts
are an index-only scan of it, and each sample is a LIMIT 3 on the same index.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Min, Q, QuerySet

from orchestrator.failures.dead_letters import ACTIONABLE
from orchestrator.metrics.sql import for_organizations
from orchestrator.models import DeadLetter

SAMPLES_PER_CLASS = 3
REASON_CHARS = 300


@dataclass(frozen=True)
class FailedInput:
    dead_letter_id: int
    outreach_id: int
    lead_id: int
    owner_id: int
    job_type: str
    status: str
    reason: str
    created_at: datetime


@dataclass(frozen=True)
class FailureClass:
    failure_class: str
    total: int
    open: int  # open or escalated: still needs a decision
    samples: list[FailedInput] = field(default_factory=list)


def dead_letter_classes(*, organization_ids: Collection[int] | None = None) -> list[FailureClass]:
    """Every class seen, most open first; samples are the newest open letters of the class
    (with `organization_ids`, only those organizations' letters, counts included: a reason can
    name a lead, and the counts are theirs; scoped as the dead-letter admin list is)."""
    rows = (
        _letters(organization_ids=organization_ids)
        .values("failure_class")
        .annotate(total=Count("id"), open=Count("id", filter=Q(status__in=ACTIONABLE)))
        .order_by("-open", "-total", "failure_class")
    )
    return [
        FailureClass(
            r["failure_class"],
            r["total"],
            r["open"],
            _samples(failure_class=r["failure_class"], organization_ids=organization_ids),
        )
        for r in rows
    ]


def oldest_open_age_s(*, now: datetime, organization_ids: Collection[int] | None = None) -> float | None:
    """How long the oldest open (or escalated) dead letter has waited for a decision."""
    oldest = (
        _letters(organization_ids=organization_ids)
        .filter(status__in=ACTIONABLE)
        .aggregate(at=Min("created_at"))["at"]
    )
    return None if oldest is None else max(0.0, (now - oldest).total_seconds())


def _letters(*, organization_ids: Collection[int] | None) -> QuerySet[DeadLetter]:
    return for_organizations(
        DeadLetter.objects.all(), organization_ids=organization_ids, path="outreach__owner__organization_id"
    )


def _samples(*, failure_class: str, organization_ids: Collection[int] | None) -> list[FailedInput]:
    letters = _letters(organization_ids=organization_ids)
    letters = letters.filter(failure_class=failure_class, status__in=ACTIONABLE).order_by("-id")
    fields = (
        "id",
        "outreach_id",
        "lead_id_ref",
        "owner_id_ref",
        "job_type",
        "status",
        "reason",
        "created_at",
    )
    rows = letters.values_list(*fields)[:SAMPLES_PER_CLASS]
    return [
        FailedInput(letter, outreach, lead, owner, job, status, reason[:REASON_CHARS], created_at)
        for letter, outreach, lead, owner, job, status, reason, created_at in rows
    ]
