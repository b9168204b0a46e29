"""The orchestrator's own records: samples of the shared LLM budget, and dead letters.

BudgetSample: the budget itself lives in Redis (orchestrator.budget) and only knows "now"; a
chart of the last hour needs history, so `orchestrator.metrics.budget_sample_record()` copies
one snapshot per minute here. The writer and readers live in orchestrator/metrics/.

DeadLetter: a terminal failure waiting for an operator. Dead letters live together in this
app: the record here, the one dead-letter path and the ways out of it (replay, cancel,
escalate) in orchestrator/dead_letters.py, their admin in orchestrator/admin.py, the replay
command in orchestrator/management/commands/replay_dead_letters.py.

Fields only.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from outreach.models import ErrorClass, Outreach


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
        # The dashboard shows every organization's owners and the whole budget: an operator's
        # view, not an organization member's (their admin lists are scoped to their own).
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
