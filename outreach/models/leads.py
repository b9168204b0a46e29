"""Leads: the people emailed, one per address per organization, who may not be emailed, and
the history of their opt-outs and reactivations."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower, Trim

from outreach.models.organizations import Organization
from outreach.models.owners import Owner
from outreach.models.validators import validate_timezone


class LeadEmailField(models.EmailField):
    """An email address as a lead's identity: trimmed and lower-cased on the way in.

    to_python also serves get_prep_value, so every ORM write *and* lookup
    (`filter(email=...)`, `email__in`) normalises its value: "Pat@Acme.com " finds
    "pat@acme.com" without each caller remembering. Raw SQL does not pass through here; the
    `lead_email_normalised` check constraint refuses what it did not normalise.
    (The local part is case-sensitive by RFC 5321; no real mailbox provider treats it so, and
    two leads differing only in case are one person.)
    """

    def to_python(self, value: object) -> str | None:
        text = super().to_python(value)
        return text.strip().lower() if isinstance(text, str) else text


# The statuses of leads nothing may be sent to, whatever the kind of email: they said no, or
# their mailbox did. Written once, as values, so the class's Meta can index them (it cannot name
# the class's Status); SUPPRESSED below is the same as Status members, checked as it is made.
SUPPRESSED_STATUSES = ("opted_out", "bounced", "complained")


class Lead(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        REPLIED = "replied", "Replied"
        OPTED_OUT = "opted_out", "Opted out"
        CONVERTED = "converted", "Converted"
        # Set from the mail side (nurture.intake.deliverability): never emailed again.
        BOUNCED = "bounced", "Undeliverable (hard bounce)"
        COMPLAINED = "complained", "Complained (marked as spam)"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="leads")
    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="leads")
    email = LeadEmailField()
    first_name = models.CharField(max_length=100, blank=True)
    last_name = models.CharField(max_length=100, blank=True)
    company = models.CharField(max_length=200, blank=True)
    title = models.CharField(max_length=200, blank=True)
    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_timezone])
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        permissions = [
            # Separate from change_lead: whoever may edit a lead's name may not undo an opt-out
            # or a bounce (nurture.sequence.lead_reactivate: a recorded reason, never a complaint).
            ("reactivate_lead", "Can reactivate an opted-out or bounced lead, with a reason"),
        ]
        constraints = [
            # With lead_email_normalised below, unique whatever the case an address was typed in.
            models.UniqueConstraint(fields=["organization", "email"], name="lead_unique_email_per_org"),
            models.CheckConstraint(
                condition=Q(email=Lower(Trim("email"))),
                name="lead_email_normalised",
                violation_error_message="A lead's email is stored trimmed and lower-case.",
            ),
        ]
        # Provider events and inbound mail find leads by address across organizations (a hard
        # bounce suppresses the address everywhere): the unique index above starts with the
        # organization, so it cannot serve that lookup.
        # The suppressed leads, for the dispatch cycle's check of the rows it loaded
        # (reads.suppressed_leads): without it PostgreSQL finds them by reading every lead, the
        # product's whole history, each cycle.
        indexes = [
            models.Index(fields=["email"], name="lead_email_idx"),
            models.Index(
                fields=["id"], name="lead_suppressed", condition=Q(status__in=list(SUPPRESSED_STATUSES))
            ),
        ]

    def __str__(self) -> str:
        return f"{self.first_name} {self.last_name} <{self.email}>".strip()


# Leads nothing may be sent to (SUPPRESSED_STATUSES), as Status members: a value that is none
# raises here, at import.
SUPPRESSED = frozenset(Lead.Status(status) for status in SUPPRESSED_STATUSES)


class LeadEvent(models.Model):
    """A change of a lead's status that someone must be able to account for later: an opt-out
    (by the link, a reply asking to stop or a provider's unsubscribe event), a hard bounce, a
    complaint, and a reactivation (who, when, why)."""

    lead = models.ForeignKey(Lead, on_delete=models.CASCADE, related_name="events")
    from_status = models.CharField(max_length=12, choices=Lead.Status.choices)
    to_status = models.CharField(max_length=12, choices=Lead.Status.choices)
    at = models.DateTimeField(auto_now_add=True)
    note = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["lead", "at"])]

    def __str__(self) -> str:
        return f"{self.from_status} -> {self.to_status}"
