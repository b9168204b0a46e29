"""Writes on owners: create or update one (the admin, `add_owner`, CSV assignment) and record
who turned its review off."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import time
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from outreach.models import MIDNIGHT, Organization, Owner


@dataclass(frozen=True)
class OwnerSpec:
    """An owner to create or update. None = keep the stored value (on a new owner: the default
    in OWNER_DEFAULTS; kind, daily limit, hours and time zone have none and must be given).
    `organization` None on an update: the one organization holding an owner of that name."""

    name: str
    kind: str | None = None
    daily_limit: int | None = None
    hours_start: time | None = None
    hours_end: time | None = None
    timezone: str | None = None
    review_required: bool | None = None
    working_days: str | None = None
    weight: int | None = None
    organization: str | None = None
    draft_ahead_days: int | None = None


OWNER_FIELDS = (
    "kind",
    "daily_limit",
    "hours_start",
    "hours_end",
    "timezone",
    "review_required",
    "working_days",
    "weight",
    "draft_ahead_days",
)
OWNER_DEFAULTS: dict[str, Any] = {
    "review_required": False,
    "working_days": "12345",
    "weight": 1,
    "draft_ahead_days": 0,
}
DEFAULT_ORGANIZATION = "Default"
OWNER_REQUIRED_ON_CREATE = ("kind", "daily_limit", "hours_start", "hours_end", "timezone")


def owner_upsert(*, spec: OwnerSpec, by: AbstractBaseUser | None = None, via: str = "") -> tuple[Owner, bool]:
    """Create the owner, or update the one with that name, changing only what `spec` names.

    Every field is validated before anything is written; the ValidationError names the field.
    Turning review off is recorded with `by` (None: no person, e.g. a shell command) and `via`.
    """
    with transaction.atomic():
        owner = _owner_find(name=spec.name, organization=spec.organization)
        created = owner.pk is None
        was_required = owner.review_required
        given = {field: getattr(spec, field) for field in OWNER_FIELDS if getattr(spec, field) is not None}
        if created:
            missing = [field for field in OWNER_REQUIRED_ON_CREATE if field not in given]
            if missing:
                raise ValidationError(dict.fromkeys(missing, "required for a new owner"))
            given = {**OWNER_DEFAULTS, **given}
        owner.name = spec.name
        for field, value in given.items():
            setattr(owner, field, value)
        owner.full_clean(exclude=["organization", "user"])
        if owner.hours_start >= owner.hours_end and owner.hours_end != MIDNIGHT:
            raise ValidationError(
                {
                    "hours": "Operating hours must start before they end, e.g. 09:00-17:00 "
                    "(an end of 00:00 is midnight: 00:00-00:00 is round the clock)."
                }
            )
        owner_review_record(owner=owner, was_required=was_required, by=by, via=via)
        owner.save()
    return owner, created


def owner_review_record(*, owner: Owner, was_required: bool, by: AbstractBaseUser | None, via: str) -> None:
    """Stamp who turned the owner's review off, when and how (unsaved: the caller saves).

    Only True -> False is recorded: it lets drafts go out unread. The stamps are the last time
    that happened; turning review back on leaves them, as history.
    """
    if was_required and not owner.review_required:
        owner.review_disabled_by_id = by.pk if by is not None else None
        owner.review_disabled_at = timezone.now()
        owner.review_disabled_via = via[:100]


def _owner_find(*, name: str, organization: str | None) -> Owner:
    """The stored owner named `name` (in `organization` if given), or a new unsaved one."""
    if organization is not None:
        org = _organization_get_or_create(name=organization)
        return Owner.objects.filter(organization=org, name=name).first() or Owner(organization=org)
    found = list(Owner.objects.filter(name=name).select_related("organization")[:2])
    if len(found) > 1:
        raise ValidationError(
            {"organization": f"owners named {name!r} exist in several organizations: say which one"}
        )
    if found:
        return found[0]
    return Owner(organization=_organization_get_or_create(name=DEFAULT_ORGANIZATION))


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
