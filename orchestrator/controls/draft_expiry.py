"""Draft expiry: a draft that waits too long for a person goes stale (the prospect's context,
the offer, the owner's calendar move on), so past its organization's `draft_expiry_days` it is
cancelled with the reason in its history instead of going out weeks later.

Run by the beat entry `drafts-expire` (orchestrator.tasks.expire_drafts). The move is
AWAITING_APPROVAL -> CANCELLED through outreach.transitions, so a reviewer who opens the draft
a moment later loses the race cleanly (TransitionLost, "someone else already handled this
draft") and can never approve it afterwards: CANCELLED is terminal.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from outreach.models import Organization, Outreach, State
from outreach.transitions import transition_many

EXPIRE_BATCH = 1000  # ids per conditional UPDATE: short row locks while reviewers work the queue


@dataclass(frozen=True)
class ExpiryRule:
    organization_id: int
    days: int

    def cutoff(self, *, now: datetime) -> datetime:
        """Drafts that reached the queue before this are stale."""
        return now - timedelta(days=self.days)

    @property
    def note(self) -> str:
        # The reason a reviewer reads in the outreach's history (OutreachEvent.note).
        return f"expired: waited more than {self.days} day(s) for approval (organization setting)"


def expiry_rules() -> list[ExpiryRule]:
    """One rule per organization with an expiry set; the others' drafts wait for ever."""
    rows = Organization.objects.filter(draft_expiry_days__isnull=False).values_list("id", "draft_expiry_days")
    return [ExpiryRule(organization_id=org_id, days=days) for org_id, days in rows if days is not None]


def drafts_expire(*, now: datetime) -> dict[int, int]:
    """Cancel every draft awaiting approval past its organization's age; organization id -> how
    many. A draft approved or rejected meanwhile is skipped by the conditional move."""
    expired: dict[int, int] = {}
    for rule in expiry_rules():
        stale = Outreach.objects.filter(
            state=State.AWAITING_APPROVAL,
            owner__organization_id=rule.organization_id,
            # state_changed_at is when the draft entered the queue (index outreach_awaiting_by_owner).
            state_changed_at__lt=rule.cutoff(now=now),
        ).order_by("id")
        count = 0
        while ids := list(stale.values_list("id", flat=True)[:EXPIRE_BATCH]):
            moved = transition_many(
                outreach_ids=ids, from_=State.AWAITING_APPROVAL, to=State.CANCELLED, note=rule.note, at=now
            )
            count += len(moved)
            if not moved:
                break  # every one locked by a reviewer right now: the next run takes them
        if count:
            expired[rule.organization_id] = count
    return expired
