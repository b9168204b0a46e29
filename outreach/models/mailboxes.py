"""Mailboxes: the addresses email leaves from, each with its own day, warm-up and spacing.

A mailbox is an address on one of its organization's verified domains, serving one or more of
its owners. An owner with no mailbox sends from the organization's single sender address, as
before mailboxes existed (the default mailbox); an owner with some sends from them in turn
(orchestrator.controls.mailboxes picks, orchestrator.budget.mailboxes counts).
"""

from __future__ import annotations

from datetime import date

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Q

from outreach.models.organizations import Organization
from outreach.models.owners import Owner


class Mailbox(models.Model):
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="mailboxes")
    address = models.EmailField(unique=True, help_text="On one of the organization's verified domains.")
    owners = models.ManyToManyField(Owner, blank=True, related_name="mailboxes")
    # Cold email: 30-50 a day per mailbox is what receivers tolerate from one address.
    daily_cap = models.PositiveIntegerField(default=40, validators=[MinValueValidator(1)])
    # The warm-up: `ramp_start` sends on `ramp_from`, `ramp_step` more each day after, up to the cap.
    ramp_from = models.DateField(default=date.today, help_text="The warm-up's day 1 (UTC).")
    ramp_start = models.PositiveIntegerField(
        default=5, validators=[MinValueValidator(1)], help_text="Sends allowed on day 1."
    )
    ramp_step = models.PositiveIntegerField(default=2, help_text="Sends added each day of the warm-up.")
    min_spacing_s = models.PositiveIntegerField(
        default=60, help_text="Seconds between two of its sends, at least."
    )
    max_spacing_s = models.PositiveIntegerField(
        default=240, help_text="Seconds between two of its sends, at most."
    )
    active = models.BooleanField(default=True, help_text="Unticked: paused, no email leaves from it.")
    # Set by an automatic pause (orchestrator.controls.deliverability); cleared on resume.
    paused_reason = models.CharField(max_length=300, blank=True, default="")
    # The bounce and complaint rates are judged on its sends since this resume only.
    resumed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "mailboxes"
        constraints = [
            models.CheckConstraint(
                condition=Q(min_spacing_s__lte=F("max_spacing_s")),
                name="mailbox_spacing_range",
                violation_error_message="min_spacing_s must not exceed max_spacing_s.",
            )
        ]

    def __str__(self) -> str:
        return self.address

    @property
    def domain(self) -> str:
        return self.address.rpartition("@")[2].lower()

    def clean(self) -> None:
        low, high = self.min_spacing_s, self.max_spacing_s
        if low is not None and high is not None and low > high:
            raise ValidationError({"max_spacing_s": "max_spacing_s: must be at least min_spacing_s."})
        if self.address and self.organization_id is not None:
            mailbox_domain_check(address=self.address, organization=self.organization)


def mailbox_domain_check(*, address: str, organization: Organization) -> None:
    """A mailbox's address must be on a domain the organization verified (VerifiedDomain): one
    tenant must not send as another's domain."""
    domain = address.rpartition("@")[2].lower()
    if not organization.verified_domains.filter(domain__iexact=domain).exists():
        raise ValidationError(
            {
                "address": f"address: {domain} is not a verified domain of {organization.name}; "
                "a superuser verifies domains (Verified domains) first."
            }
        )
