"""Dead letters by failure class, with a few recent failed inputs (ids and reason) per class.

The DeadLetter table holds failures only and is indexed on (status, failure_class): the counts
are an index-only scan of it, and each sample is a LIMIT 3 on the same index.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q

from orchestrator.dead_letters import ACTIONABLE
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
    (with `organization_ids`, only those organizations' letters: a reason can name a lead)."""
    rows = (
        DeadLetter.objects.values("failure_class")
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


def _samples(*, failure_class: str, organization_ids: Collection[int] | None) -> list[FailedInput]:
    letters = DeadLetter.objects.filter(failure_class=failure_class, status__in=ACTIONABLE).order_by("-id")
    if organization_ids is not None:
        letters = letters.filter(organization_id_ref__in=organization_ids)
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
