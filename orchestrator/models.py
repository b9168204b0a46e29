"""The orchestrator's own records: samples of the shared LLM budget, dead letters, and pauses.

BudgetSample: the budget itself lives in Redis (orchestrator.budget) and only knows "now"; a
chart of the last hour needs history, so `orchestrator.metrics.budget_use.budget_sample_record()` copies
one snapshot per minute here. The writer and readers live in orchestrator/metrics/.

DeadLetter: a terminal failure waiting for an operator. Dead letters live together in this
app: the record here, the one dead-letter path and the ways out of it (replay, cancel,
escalate) in orchestrator/failures/dead_letters.py, their admin in backoffice/admin/organizations.py, the replay
command in orchestrator/management/commands/replay_dead_letters.py.

Pause: a stop on part of the work (an organization, an owner, a tier, a sender domain, or
several at once), set by an operator or by an automatic rule, and lifted by an operator. The
rules that read it live in orchestrator/controls/pauses.py.

Fields only.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from outreach.models import ErrorClass, Organization, Outreach, Owner
from outreach.tiers import Tier


class BudgetSample(models.Model):
    """The provider scope of the LLM budget at one minute (requests/tokens per sliding 60 s)."""

    # Truncated to the minute and unique: the cluster-wide "once a minute" guard. Two dispatchers
    # racing to record the same minute end with one row (the loser's INSERT conflicts), and the
    # dashboard's "last hour" read is a range scan of this index (at most 60 rows).
    at = models.DateTimeField(unique=True)
    requests = models.PositiveIntegerField(help_text="Provider calls in the last 60 s window.")
    tokens = models.PositiveBigIntegerField(help_text="Tokens used in the last 60 s window.")
    limit_rpm = models.PositiveIntegerField(help_text="Configured requests/min (LLM_RPM).")
    limit_tpm = models.PositiveBigIntegerField(help_text="Configured tokens/min (LLM_TPM).")
    effective_rpm = models.PositiveIntegerField(help_text="Window limit after adaptation (429s, headers).")
    effective_tpm = models.PositiveBigIntegerField(help_text="Window limit after adaptation (429s, headers).")
    rate_rpm = models.PositiveIntegerField(default=0, help_text="Dispatch refill rate: requests/min.")
    rate_tpm = models.PositiveBigIntegerField(default=0, help_text="Dispatch refill rate: tokens/min.")
    in_flight = models.PositiveIntegerField(default=0, help_text="Reservations held by running jobs.")
    provider_429s = models.PositiveIntegerField(default=0, help_text="429s recorded in the minute.")

    class Meta:
        ordering = ["at"]
        # The dashboard shows the whole budget, and a superuser every organization: an
        # operator's view, granted on purpose (a member sees only their organizations' figures).
        permissions = [("view_queue_health", "Can view the queue-health dashboard and metrics")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.requests}/{self.effective_rpm} rpm"


class DeadLetter(models.Model):
    """A terminal failure an operator can replay, cancel or escalate."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        REPLAYED = "replayed", "Replayed"
        CANCELLED = "cancelled", "Cancelled"
        ESCALATED = "escalated", "Escalated"

    outreach = models.ForeignKey(Outreach, on_delete=models.CASCADE, related_name="dead_letters")
    job_type = models.CharField(max_length=40, help_text="generation or send")
    payload = models.JSONField(default=dict, help_text="The original job: ids and idempotency key.")
    failure_class = models.CharField(max_length=16, choices=ErrorClass.choices)
    reason = models.TextField()
    retry_history = models.JSONField(default=list)
    suggested_action = models.CharField(max_length=200)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    lead_id_ref = models.BigIntegerField(help_text="Lead id at failure time.")
    owner_id_ref = models.BigIntegerField(help_text="Owner id at failure time.")
    organization_id_ref = models.BigIntegerField(help_text="Organization id at failure time.")
    first_failed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    replay_succeeded = models.BooleanField(null=True, blank=True, help_text="Set when a replayed job ends.")

    class Meta:
        # The model moved here from the outreach app; its table and index kept their names, so
        # the move touched no data (orchestrator migration 0003, outreach migration 0005).
        db_table = "outreach_deadletter"
        indexes = [
            # Queue health counts letters per class and lists the open ones of a class
            # (orchestrator.metrics.dead_letter_classes).
            models.Index(fields=["status", "failure_class"], name="outreach_de_status_eee025_idx"),
        ]

    def __str__(self) -> str:
        return f"dead letter #{self.pk} ({self.failure_class}) for outreach {self.outreach_id}"


class Pause(models.Model):
    """Work matching every scope field that is set waits QUEUED (or APPROVED) until resumed.

    An organization pause stops all its owners; an owner pause one owner; a tier pause that tier
    (in one organization, or everywhere when no organization is set); a sender-domain pause every
    organization sending from that domain. Fields combine: organization + tier pauses that
    organization's nudges only. Active while `resumed_at` is empty; kept afterwards as history.
    """

    class Source(models.TextChoices):
        OPERATOR = "operator", "Operator"
        BOUNCES = "bounces", "Hard-bounce rate"
        COMPLAINTS = "complaints", "Complaint rate"

    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.CASCADE, related_name="pauses"
    )
    owner = models.ForeignKey(Owner, null=True, blank=True, on_delete=models.CASCADE, related_name="pauses")
    tier = models.PositiveSmallIntegerField(
        null=True, blank=True, choices=[(t.value, t.name.lower()) for t in Tier]
    )
    sender_domain = models.CharField(max_length=253, blank=True, help_text="e.g. example.com (lower case).")
    source = models.CharField(max_length=12, choices=Source.choices, default=Source.OPERATOR)
    reason = models.CharField(max_length=300, blank=True, help_text="Why: shown on the waiting work.")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    resumed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    resumed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(organization__isnull=False)
                | Q(owner__isnull=False)
                | Q(tier__isnull=False)
                | ~Q(sender_domain=""),
                name="pause_has_a_scope",
                violation_error_message="A pause names an organization, an owner, a tier or a sender domain.",
            )
        ]
        indexes = [
            # Every dispatch cycle and job start reads the active pauses: a handful of rows.
            models.Index(fields=["created_at"], condition=Q(resumed_at__isnull=True), name="pause_active"),
        ]

    def __str__(self) -> str:
        return f"pause of {self.scope_text()}"

    def scope_text(self) -> str:
        """'owner Ann, tier nudge' and the like: what this pause stops, in words."""
        parts = []
        if self.owner is not None:
            parts.append(f"owner {self.owner.name}")
        elif self.organization is not None:
            parts.append(f"organization {self.organization.name}")
        if self.tier is not None:
            parts.append(f"tier {Tier(self.tier).name.lower()}")
        if self.sender_domain:
            parts.append(f"sender domain {self.sender_domain}")
        return ", ".join(parts) or "everything"

    def blocked_reason(self) -> str:
        """What waiting work says: 'paused by alice at 2026-11-23 09:00 UTC (owner Ann): reason'."""
        who = f"by {self.created_by}" if self.created_by_id is not None else "automatically"
        text = f"paused {who} at {self.created_at:%Y-%m-%d %H:%M} UTC ({self.scope_text()})"
        return f"{text}: {self.reason}"[:200] if self.reason else text[:200]
