"""Writes on mailboxes: create or update one with the owners it serves (`add_mailbox`), and
resume one that was paused."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from outreach.models import Mailbox, Organization, Owner


@dataclass(frozen=True)
class MailboxSpec:
    """A mailbox to create or update. None = keep the stored value (a new one: the model's default)."""

    address: str
    organization: str
    owners: tuple[str, ...] = ()  # owner names to add; none: keep
    daily_cap: int | None = None
    ramp_start: int | None = None
    ramp_step: int | None = None
    ramp_from: date | None = None
    min_spacing_s: int | None = None
    max_spacing_s: int | None = None
    active: bool | None = None


FIELDS = ("daily_cap", "ramp_start", "ramp_step", "ramp_from", "min_spacing_s", "max_spacing_s", "active")


def mailbox_upsert(*, spec: MailboxSpec) -> tuple[Mailbox, bool]:
    """Create or update the mailbox at `spec.address` and add the owners it serves. Raises
    ValidationError keyed by the field at fault (organization, address, owners, a limit)."""
    organization = Organization.objects.filter(name=spec.organization).first()
    if organization is None:
        raise ValidationError({"organization": f"no organization named {spec.organization!r}."})
    address = spec.address.strip().lower()
    with transaction.atomic():
        mailbox = Mailbox.objects.select_for_update().filter(address=address).first()
        created = mailbox is None
        if mailbox is None:
            mailbox = Mailbox(organization=organization, address=address)
        elif mailbox.organization_id != organization.pk:
            raise ValidationError({"address": f"{address} is a mailbox of another organization."})
        for field in FIELDS:
            value = getattr(spec, field)
            if value is not None:
                setattr(mailbox, field, value)
        if spec.active:
            mailbox.paused_reason, mailbox.resumed_at = "", timezone.now()
        mailbox.full_clean()
        mailbox.save()
        mailbox.owners.add(*_owners(organization=organization, names=spec.owners))
    return mailbox, created


def mailbox_resume(*, mailbox_ids: list[int]) -> int:
    """Active again; its bounce and complaint rates count from now (deliverability)."""
    return Mailbox.objects.filter(pk__in=mailbox_ids, active=False).update(
        active=True, paused_reason="", resumed_at=timezone.now()
    )


def _owners(*, organization: Organization, names: tuple[str, ...]) -> list[Owner]:
    found = {o.name: o for o in Owner.objects.filter(organization=organization, name__in=names)}
    missing = [name for name in names if name not in found]
    if missing:
        raise ValidationError({"owners": f"no owner {', '.join(missing)} in {organization.name}."})
    return [found[name] for name in names]
