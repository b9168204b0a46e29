"""Lead assignments: one batch per `assign_leads` file, one item per lead in it."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from outreach.models.leads import Lead
from outreach.models.organizations import Organization
from outreach.models.owners import Owner


class AssignmentBatch(models.Model):
    """One `assign_leads` run: the parent of one child per lead in the file.

    Fan-in without waiting: whoever finishes children (the command in-process, or Celery
    workers with --fan-out) adds them to `children_done` in the same transaction as their
    writes, and a conditional UPDATE (children_done = children_total) completes the parent.
    Nobody blocks on the children; the command only reads these counters.
    """

    class Status(models.TextChoices):
        LOADING = "loading", "Loading"
        COMPLETED = "completed", "Completed"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="assignments")
    file_name = models.CharField(max_length=500)
    file_sha256 = models.CharField(max_length=64)
    rows = models.PositiveIntegerField(help_text="Data rows in the file.")
    children_total = models.PositiveIntegerField()
    children_done = models.PositiveIntegerField(default=0)
    leads_created = models.PositiveIntegerField(default=0)
    leads_existing = models.PositiveIntegerField(default=0, help_text="Already there: kept unchanged.")
    outreach_created = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.LOADING)
    created_at = models.DateTimeField(help_text="The assignment time: the sequences' anchor.")
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "assignment batches"
        constraints = [
            models.CheckConstraint(
                condition=Q(children_done__lte=models.F("children_total")), name="assignment_done_le_total"
            ),
        ]

    def __str__(self) -> str:
        return f"assignment #{self.pk} {self.file_name} ({self.children_done}/{self.children_total})"


class AssignmentItem(models.Model):
    """One lead of an assignment: the validated CSV row (so a worker needs only ids) and its outcome."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DONE = "done", "Done"

    class Outcome(models.TextChoices):
        NEW = "new", "New lead: sequence queued"
        EXISTING = "existing", "Existing lead: kept; sequence queued if it had none"
        STOPPED = "stopped", "Existing lead replied/opted out/converted: nothing queued"

    batch = models.ForeignKey(AssignmentBatch, on_delete=models.CASCADE, related_name="children")
    line = models.PositiveIntegerField(help_text="Line in the CSV file (header = 1).")
    email = models.EmailField()
    first_name = models.CharField(max_length=100, blank=True)
    last_name = models.CharField(max_length=100, blank=True)
    company = models.CharField(max_length=200, blank=True)
    title = models.CharField(max_length=200, blank=True)
    timezone = models.CharField(max_length=64)
    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    outcome = models.CharField(max_length=8, choices=Outcome.choices, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["batch", "email"], name="assignment_item_unique_email"),
        ]

    def __str__(self) -> str:
        return f"line {self.line}: {self.email} [{self.status}]"
