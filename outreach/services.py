"""Writes on the records: creating owners and outreach, and the human review of drafts."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from outreach.draft_policy import check_draft
from outreach.models import Lead, Organization, Outreach, Owner, State
from outreach.transitions import TransitionLost, transition


@dataclass(frozen=True)
class OwnerSpec:
    name: str
    kind: str
    daily_limit: int
    hours_start: time
    hours_end: time
    timezone: str
    review_required: bool = False
    working_days: str = "12345"
    weight: int = 1
    organization: str = "Default"


def owner_upsert(*, spec: OwnerSpec) -> tuple[Owner, bool]:
    """Create the owner, or update the one with that name in that organization.

    Every field is validated before anything is written; the ValidationError names the field.
    """
    with transaction.atomic():
        org = _organization_get_or_create(name=spec.organization)
        owner = Owner.objects.filter(organization=org, name=spec.name).first() or Owner(organization=org)
        created = owner.pk is None
        for field in ("name", "kind", "daily_limit", "hours_start", "hours_end", "timezone"):
            setattr(owner, field, getattr(spec, field))
        owner.review_required = spec.review_required
        owner.working_days = spec.working_days
        owner.weight = spec.weight
        owner.full_clean(exclude=["organization", "user"])
        if owner.hours_start >= owner.hours_end:
            raise ValidationError({"hours": "Operating hours must start before they end, e.g. 09:00-17:00."})
        owner.save()
    return owner, created


def _organization_get_or_create(*, name: str) -> Organization:
    """The named organization, created if missing (inside the caller's transaction, so it is
    rolled back if the owner turns out invalid). A blank or over-long name is a ValidationError
    naming `organization`, not a database error."""
    name = name.strip()
    org = Organization.objects.filter(name=name).first()
    if org is not None:
        return org
    try:
        Organization(name=name).full_clean(validate_unique=False)
    except ValidationError as exc:
        problems = " ".join(exc.message_dict.get("name", exc.messages))
        raise ValidationError({"organization": f"organization name {name!r}: {problems}"}) from None
    return Organization.objects.get_or_create(name=name)[0]  # get_: a concurrent run created it


def outreach_enqueue(
    *,
    lead: Lead,
    kind: Outreach.Kind,
    idempotency_key: str,
    not_before: datetime | None = None,
    step: int = 0,
    context: dict[str, Any] | None = None,
    in_reply_to: str = "",
) -> tuple[Outreach, bool]:
    """Queue one piece of work; re-enqueueing the same idempotency key returns the first one."""
    now = timezone.now()
    return Outreach.objects.get_or_create(
        idempotency_key=idempotency_key,
        defaults={
            "lead": lead,
            "owner_id": lead.owner_id,
            "kind": kind,
            "tier": Outreach.KIND_TIER[kind],
            "state": State.QUEUED,
            "not_before": not_before or now,
            "step": step,
            "context": context or {},
            "in_reply_to": in_reply_to,
            "state_changed_at": now,
        },
    )


def draft_approve(
    *, outreach: Outreach, by: AbstractBaseUser, subject: str | None = None, body: str | None = None
) -> None:
    """Approve a draft, optionally edited; the approved-send path sends it with no LLM call.

    An edit must pass outreach.draft_policy.check_draft, as the model's draft did (ValidationError
    listing the violations otherwise): the subject becomes a header, the body goes to a prospect.
    """
    edits = {
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
    transition(
        outreach_id=outreach.pk,
        from_=State.AWAITING_APPROVAL,
        to=State.REJECTED,
        note=f"rejected: {reason}" if reason else "rejected",
        actor_id=by.pk,
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
