"""Referral proposals: proposed by a reply's triage, confirmed or dismissed by a person.

`referral_propose` keeps what the reply named (its contact checked: a valid address or none);
`referral_confirm` creates the contact as a lead of the referring lead's owner, once, recording
who and when; `referral_dismiss` closes it. Tenancy and the permission are the caller's (the
admin acts only on rows it lists to the user, and asks for `confirm_referralproposal`).
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.utils import timezone

from outreach.models import Lead, Outreach, ReferralProposal
from outreach.services.operations import NotActionable

_NAME_CHARS = 200


def referral_contact_clean(*, email: str, name: str) -> tuple[str, str]:
    """The contact as stored: a valid address (else "") and a one-line name."""
    address = " ".join(str(email).split())[:254].strip("<>").lower()
    try:
        validate_email(address)
    except ValidationError:
        address = ""
    return address, " ".join(str(name).split())[:_NAME_CHARS]


def referral_propose(*, source: Outreach, email: str, name: str, reason: str) -> ReferralProposal:
    """Keep the contact a reply refers us to (idempotent per reply: the first proposal stays)."""
    address, clean_name = referral_contact_clean(email=email, name=name)
    proposal, _ = ReferralProposal.objects.get_or_create(
        source=source,
        defaults={
            "organization_id": source.lead.organization_id,
            "lead_id": source.lead_id,
            "contact_email": address,
            "contact_name": clean_name,
            "reason": reason[:300],
        },
    )
    return proposal


def referral_confirm(*, proposal_id: int, by_id: int) -> Lead:
    """A person confirms: the contact becomes a lead of the referring lead's owner (or the
    organization's existing lead with that address). Raises NotActionable naming the row when
    it was decided already or names no address."""
    with transaction.atomic():
        proposal = (
            ReferralProposal.objects.select_for_update(of=("self",))
            .select_related("lead")
            .get(pk=proposal_id)
        )
        _undecided(proposal)
        if not proposal.contact_email:
            raise NotActionable(
                f"referral #{proposal.pk} names no email address: dismiss it, or add the lead by hand"
            )
        referrer = proposal.lead
        first, _, last = proposal.contact_name.partition(" ")
        lead, _ = Lead.objects.get_or_create(
            organization_id=referrer.organization_id,
            email=proposal.contact_email,
            defaults={
                "owner_id": referrer.owner_id,
                "first_name": first[:100],
                "last_name": last[:100],
                "company": referrer.company,
            },
        )
        ReferralProposal.objects.filter(pk=proposal.pk).update(
            status=ReferralProposal.Status.CONFIRMED,
            decided_by_id=by_id,
            decided_at=timezone.now(),
            created_lead=lead,
        )
    return lead


def referral_dismiss(*, proposal_id: int, by_id: int) -> None:
    """A person dismisses the proposal: nothing is created. NotActionable when decided already."""
    with transaction.atomic():
        proposal = ReferralProposal.objects.select_for_update().get(pk=proposal_id)
        _undecided(proposal)
        ReferralProposal.objects.filter(pk=proposal.pk).update(
            status=ReferralProposal.Status.DISMISSED, decided_by_id=by_id, decided_at=timezone.now()
        )


def _undecided(proposal: ReferralProposal) -> None:
    if proposal.status != ReferralProposal.Status.PROPOSED:
        raise NotActionable(f"referral #{proposal.pk} was {proposal.status} already")
