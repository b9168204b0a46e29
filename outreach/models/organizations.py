"""Organizations (the tenants), their members and the mail domains they proved they own."""

from __future__ import annotations

from decimal import Decimal
from email.utils import parseaddr

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q

from outreach.models.triage import autonomous_default, validate_reply_autonomous_classes
from outreach.models.validators import validate_nudge_days


class Organization(models.Model):
    name = models.CharField(max_length=200, unique=True)
    # Per-organization LLM limits (a share of the provider key); empty = provider limits only.
    llm_rpm = models.PositiveIntegerField(null=True, blank=True, help_text="Requests/min; empty = no cap.")
    llm_tpm = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens/min; empty = no cap.")
    allowed_link_domains = models.CharField(
        max_length=500, blank=True, help_text="Comma-separated domains links in emails may point to."
    )
    sender_email = models.EmailField(blank=True)
    # The prompt forbids phone numbers; nurture.writing.draft_policy refuses them unless this is set.
    allow_phone_numbers = models.BooleanField(
        default=False, db_default=False, help_text="Drafts may contain phone numbers."
    )
    # The nurture cadence: nudges after these business days (lead's time zone); owners may override.
    # db_default too: rows inserted by raw SQL (bench/dispatch.py) get the same cadence.
    nudge_days = models.CharField(
        max_length=50, default="3,7", db_default="3,7", validators=[validate_nudge_days], help_text="e.g. 3,7"
    )
    # A draft nobody approves goes stale: after this many days awaiting approval it is cancelled
    # with the reason in its history (orchestrator.controls.draft_expiry, beat entry `drafts-expire`).
    draft_expiry_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Drafts awaiting approval longer than this many days are cancelled; empty = never.",
    )
    # Compliance text (postal address, opt-out sentence) that code appends below every email at
    # send time (nurture.mail.compliance.email_body): never shown to the model, never written by it.
    compliance_footer = models.TextField(
        blank=True,
        default="",
        db_default="",
        max_length=1000,
        help_text="Appended below every email at send time, e.g. the postal address and how to opt out.",
    )
    # Who works this organization's drafts: a non-superuser reviewer sees and approves only the
    # drafts of owners in organizations they are a member of (backoffice.admin.outreach.ApprovalQueueAdmin).
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="organizations")
    # LLM spend per UTC day (orchestrator.controls.spend): work beyond it waits QUEUED until the next day.
    daily_spend_cap = models.DecimalField(
        max_digits=10,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Dollars of LLM spend per UTC day; empty = no cap.",
    )
    # Sending in the recipient's business hours (orchestrator.controls.send_rules): an email leaves
    # between these hours of the lead's time zone, Monday to Friday; both empty = any time.
    business_hours_start = models.PositiveSmallIntegerField(
        null=True, blank=True, validators=[MaxValueValidator(23)], help_text="e.g. 9; empty = any time."
    )
    business_hours_end = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(24)],
        help_text="e.g. 17 (exclusive); empty = any time.",
    )
    # Not 40 emails to one company in a day: sends per recipient domain per UTC day.
    recipient_domain_daily_cap = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Emails per recipient domain per UTC day; empty = no cap.",
    )
    # Reply triage (nurture.intake.triage): the classes an autonomous owner answers without a
    # person (complaint/legal/pricing and "other" always go to one), whether an objection gets a
    # polite close (else the sequence stops with no answer), and the quiet period a lead's
    # messages are gathered over before one answer is written (empty = REPLY_QUIET_S).
    reply_autonomous_classes = models.JSONField(
        default=autonomous_default,
        blank=True,
        validators=[validate_reply_autonomous_classes],
        help_text='Reply classes an autonomous owner may answer alone, e.g. ["interested", "question"].',
    )
    reply_objection_close = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Answer an objection with a polite close (else: the sequence stops, no answer).",
    )
    reply_quiet_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MaxValueValidator(3600)],
        help_text="Seconds a lead must be quiet before their messages are answered; empty = REPLY_QUIET_S.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(Q(business_hours_start__isnull=True) & Q(business_hours_end__isnull=True))
                | Q(business_hours_start__lt=F("business_hours_end")),
                name="organization_business_hours",
                violation_error_message="business_hours_start and business_hours_end: both or neither, start before end.",
            )
        ]
        permissions = [
            (
                "change_organization_settings",
                "Can change organization-wide settings (LLM caps, link domains, sender, owner weight)",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def sender_address(self) -> str:
        """The bare address this organization's emails come from (DEFAULT_FROM_EMAIL when unset)."""
        sender = self.sender_email or settings.DEFAULT_FROM_EMAIL
        return parseaddr(sender)[1] or sender

    @property
    def sender_domain(self) -> str:
        """The domain of `sender_address`, lower-case: what providers and pauses count by."""
        return self.sender_address.rpartition("@")[2].lower()


class VerifiedDomain(models.Model):
    """A mail domain an organization proved it owns: its sender_email must be on one of these.

    Kept by superusers only (backoffice.admin.organizations.VerifiedDomainAdmin), so one tenant cannot send
    as another by typing the other's address into its own sender field.
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="verified_domains")
    domain = models.CharField(max_length=253, help_text="e.g. example.com (lower case, no @).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "domain"], name="verified_domain_unique_per_org")
        ]

    def __str__(self) -> str:
        return self.domain
