"""The orchestrator's own records: samples of the shared LLM budget for the queue-health dashboard.

The budget itself lives in Redis (orchestrator.budget) and only knows "now"; a chart of the
last hour needs history, so `orchestrator.metrics.budget_sample_record()` copies one snapshot
per minute here. Fields only; the writer and readers live in orchestrator/metrics/.
"""

from __future__ import annotations

from django.db import models


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
