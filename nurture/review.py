"""The human review of drafts: approve (optionally edited, under the same policy as the model's
draft) or reject with a reason. An approved draft is sent with no other LLM call."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.utils import timezone

from nurture.writing.draft_policy import check_draft
from outreach.models import Outreach, State
from outreach.transitions import TransitionLost, transition


def draft_approve(
    *, outreach: Outreach, by: AbstractBaseUser, subject: str | None = None, body: str | None = None
) -> None:
    """Approve a draft, optionally edited; the approved-send path sends it with no LLM call.

    An edit must pass nurture.writing.draft_policy.check_draft, as the model's draft did (ValidationError
    listing the violations otherwise): the subject becomes a header, the body goes to a prospect.
    """
    edits: dict[str, Any] = {
        name: value
        for name, value in (("draft_subject", subject), ("draft_body", body))
        if value is not None and value != getattr(outreach, name)
    }
    if edits:
        violations = check_draft(
            subject=edits.get("draft_subject", outreach.draft_subject),
            body=edits.get("draft_body", outreach.draft_body),
            allowed_domains=outreach.lead.organization.allowed_link_domains,
            allow_phone_numbers=outreach.lead.organization.allow_phone_numbers,
        )
        if violations:
            raise ValidationError(violations)
    transition(
        outreach_id=outreach.pk,
        from_=State.AWAITING_APPROVAL,
        to=State.APPROVED,
        note="edited and approved" if edits else "approved",
        actor_id=by.pk,
        approved_by_id=by.pk,
        approved_at=timezone.now(),
        **edits,
    )


def draft_reject(*, outreach: Outreach, by: AbstractBaseUser, reason: str = "") -> None:
    """Reject a draft; the reason is kept on the row (counted on the dashboard) and in its history."""
    reason = " ".join(reason.split())[: Outreach._meta.get_field("rejected_reason").max_length]
    transition(
        outreach_id=outreach.pk,
        from_=State.AWAITING_APPROVAL,
        to=State.REJECTED,
        note=f"rejected: {reason}" if reason else "rejected",
        actor_id=by.pk,
        rejected_reason=reason,
    )


def drafts_approve(*, drafts: Iterable[Outreach], by: AbstractBaseUser) -> int:
    """Approve each draft as it stands; those someone else moved first are skipped. How many."""
    approved = 0
    for draft in drafts:
        try:
            draft_approve(outreach=draft, by=by)
            approved += 1
        except TransitionLost:
            pass  # approved, rejected or cancelled meanwhile
    return approved
