"""Referral proposals: a reply that names someone else to contact ("I have left, write to Sam
at sam@x.example"), kept as a proposed lead until a person confirms or dismisses it.

Nothing is mailed to a proposed contact: the contact is third-party text read out of an inbound
email by rules or a model (hostile until a person looks), so only a person's confirmation
(outreach.services.referrals.referral_confirm, permission `confirm_referralproposal`) turns it
into a lead of the same owner.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from outreach.models.leads import Lead
from outreach.models.organizations import Organization
from outreach.models.outreach import Outreach


class ReferralProposal(models.Model):
    class Status(models.TextChoices):
        PROPOSED = "proposed", "Proposed (waiting for a person)"
        CONFIRMED = "confirmed", "Confirmed (a lead was created)"
        DISMISSED = "dismissed", "Dismissed"

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="referrals")
    # The lead who referred us, and the reply that did it.
    lead = models.ForeignKey(Lead, on_delete=models.CASCADE, related_name="referrals")
    source = models.ForeignKey(Outreach, on_delete=models.CASCADE, related_name="referrals")
    contact_email = models.CharField(
        max_length=254, blank=True, help_text="Empty: the reply named nobody's address."
    )
    contact_name = models.CharField(max_length=200, blank=True)
    reason = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PROPOSED)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_lead = models.ForeignKey(Lead, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        permissions = [("confirm_referralproposal", "Can confirm or dismiss a referral proposal")]
        constraints = [
            # One proposal per reply: a re-run of the reply's triage finds the first.
            models.UniqueConstraint(fields=["source"], name="referral_one_per_reply"),
        ]

    def __str__(self) -> str:
        return f"referral #{self.pk} {self.contact_email or '(no address)'} ({self.status})"
