"""Owners (execution contexts, the unit of fairness) and the emails each sent per local day."""

from __future__ import annotations

from datetime import time

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from outreach.models.organizations import Organization
from outreach.models.validators import validate_nudge_days, validate_timezone, working_days_validator

# An owner's hours that end at 00:00 end at midnight, the end of the day (00:00-00:00: all day).
MIDNIGHT = time(0)


class Owner(models.Model):
    """An execution context: an AI agent (bot user) or a human seller. Fairness is per owner."""

    class Kind(models.TextChoices):
        AGENT = "agent", "AI agent"
        HUMAN = "human", "Human seller"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="owners")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="owner"
    )
    daily_limit = models.PositiveIntegerField(default=50, validators=[MinValueValidator(1)])
    hours_start = models.TimeField(default=time(9, 0))
    hours_end = models.TimeField(default=time(17, 0))
    working_days = models.CharField(max_length=7, default="12345", validators=[working_days_validator])
    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_timezone])
    review_required = models.BooleanField(default=False)
    # The last time review was turned off (True -> False): it lets drafts go out unread, so it
    # takes the approve permission and is recorded. `by` is NULL when no person did it (the
    # add_owner shell command); `via` then says what did.
    review_disabled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    review_disabled_at = models.DateTimeField(null=True, blank=True)
    review_disabled_via = models.CharField(max_length=100, blank=True, default="")
    # Drafts a review-required owner may hold beyond today's: its day's sends, plus this many
    # days' more for a team that reviews tomorrow's mail in advance (the dispatcher's admission,
    # orchestrator/dispatch/selection/admission.py, rule 5). db_default: existing rows get 0.
    draft_ahead_days = models.PositiveSmallIntegerField(
        default=0,
        db_default=0,
        validators=[MaxValueValidator(14)],
        help_text="Review required: days of drafts written ahead beyond today's (0-14).",
    )
    weight = models.PositiveSmallIntegerField(default=1, validators=[MinValueValidator(1)])
    active = models.BooleanField(default=True)
    # Empty = the organization's cadence (a blank string, not NULL: one "unset" value, DJ001).
    nudge_days = models.CharField(
        max_length=50,
        blank=True,
        default="",
        db_default="",
        validators=[validate_nudge_days],
        help_text="Empty = organization's.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="owner_unique_name_per_org"),
            # An end of 00:00 is midnight, the end of the day: 00:00-00:00 is round the clock.
            models.CheckConstraint(
                condition=Q(hours_start__lt=models.F("hours_end")) | Q(hours_end=MIDNIGHT),
                name="owner_hours_order",
            ),
            models.CheckConstraint(condition=Q(daily_limit__gte=1), name="owner_daily_limit_positive"),
            models.CheckConstraint(condition=Q(weight__gte=1), name="owner_weight_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"


class OwnerDailySends(models.Model):
    """Emails an owner sent on one local calendar day.

    The dispatcher checks every owner's daily limit each cycle; reading one row per owner keeps
    that cost proportional to owners, where counting the day's SENT rows grew with the day's
    history (see orchestrator.dispatch.reads.committed_today). Written only by
    `outreach.models.queries.owner_daily_sends_record`.
    """

    owner = models.ForeignKey(Owner, on_delete=models.CASCADE, related_name="daily_sends")
    day = models.DateField()  # the owner's local date
    sent = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name_plural = "owner daily sends"
        constraints = [models.UniqueConstraint(fields=["owner", "day"], name="owner_daily_sends_unique")]

    def __str__(self) -> str:
        return f"{self.owner_id} on {self.day}: {self.sent}"


class OwnersVersion(models.Model):
    """One row whose token every statement that writes owners, organizations, mailboxes or
    mailboxes' owners renews, in the writer's transaction (PostgreSQL triggers: migrations 0029
    and 0031), so a process that keeps the owners and their mailboxes in memory knows whether
    they changed since it read them without reading them (the dispatcher:
    orchestrator.dispatch.reads.active_owners). Written by the triggers only; absent until the
    first such write (or after the table is emptied): then nothing is kept."""

    token = models.UUIDField()
    changed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"owners {self.token} at {self.changed_at}"
