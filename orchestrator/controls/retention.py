"""Retention: the scheduled prune of history nobody reads any more (beat entry `retention-prune`).

What goes, each past its own age (settings RETENTION_*, README "Configuration"):
- outreach events (the transition history), never inside METRICS_WINDOW_S: the dashboard's
  window figures are computed from them;
- dead letters an operator has resolved (replayed or cancelled); open and escalated ones stay;
- the per-lead items of completed assignments (names and emails copied from the CSV); the
  assignment's summary row stays;
- unverified inbound email (held or accepted; nurture.intake.unverified), counted from its
  arrival: a held message nobody accepted in that time is not going to be answered;
- expired Django sessions.
Budget samples keep their own retention (orchestrator.metrics.budget_use.budget_sample_record drops one
old minute per new one); they are listed in `table_sizes` only.

How: DELETE ... WHERE pk IN (SELECT pk ... ORDER BY pk LIMIT n), one statement per batch, each
in its own transaction: never one giant DELETE holding locks and writing a day's WAL in one
commit. A run stops after about `budget_s` (one dispatch interval): the orchestrator queue
is for short work, so the task queues its own continuation while rows remain.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.sessions.models import Session
from django.db.models import Model, Q, QuerySet
from django.utils import timezone

from orchestrator.models import BudgetSample, DeadLetter
from outreach.models import AssignmentBatch, AssignmentItem, OutreachEvent, UnverifiedInbound


@dataclass(frozen=True)
class RetentionRule:
    name: str
    model: type[Model]
    stale: Q
    # The primary key grows with this time column (set on insert): the scan for stale rows can
    # stop at the first recent id instead of walking every recent row (see _stale_below).
    id_follows: str = ""


@dataclass
class PruneReport:
    deleted: dict[str, int] = field(default_factory=dict)
    statements: int = 0
    finished: bool = True


def retention_rules(*, now: datetime) -> list[RetentionRule]:
    """What is stale at `now`, per table, from the settings' ages."""
    window = timedelta(seconds=settings.METRICS_WINDOW_S)
    events_age = max(_days(settings.RETENTION_EVENTS_DAYS), window)  # never inside the window
    resolved = [DeadLetter.Status.REPLAYED, DeadLetter.Status.CANCELLED]
    return [
        RetentionRule("outreach events", OutreachEvent, Q(at__lt=now - events_age), id_follows="at"),
        RetentionRule(
            "dead letters",
            DeadLetter,
            Q(status__in=resolved, resolved_at__lt=now - _days(settings.RETENTION_DEAD_LETTERS_DAYS)),
        ),
        RetentionRule(
            "assignment items",
            AssignmentItem,
            Q(
                batch__status=AssignmentBatch.Status.COMPLETED,
                batch__completed_at__lt=now - _days(settings.RETENTION_ASSIGNMENT_ITEMS_DAYS),
            ),
        ),
        RetentionRule(
            "unverified inbound",
            UnverifiedInbound,
            Q(received_at__lt=now - _days(settings.RETENTION_UNVERIFIED_INBOUND_DAYS)),
            id_follows="received_at",
        ),
        RetentionRule("sessions", Session, Q(expire_date__lt=now)),
    ]


def retention_prune(
    *,
    now: datetime | None = None,
    batch_rows: int | None = None,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> PruneReport:
    """Delete stale rows in batches of `batch_rows` until none remain or `budget_s` has passed.
    The budget is checked before each statement but the first: a run overshoots by at most one
    statement, and always makes progress however small the budget."""
    now = now or timezone.now()
    batch_rows = batch_rows or settings.RETENTION_BATCH_ROWS
    budget_s = float(settings.DISPATCH_INTERVAL) if budget_s is None else budget_s
    report, started = PruneReport(), clock()
    for rule in retention_rules(now=now):
        report.deleted[rule.name] = 0
        stale = _stale_below(rule)
        while True:
            if report.statements and clock() - started >= budget_s:
                report.finished = False
                return report
            ids = stale.order_by("pk").values("pk")[:batch_rows]
            # Autocommit: each DELETE is its own transaction (the collector's atomic block).
            deleted, _ = rule.model._default_manager.filter(pk__in=ids).delete()
            report.deleted[rule.name] += deleted
            report.statements += 1
            if deleted < batch_rows:
                break
    return report


def table_sizes() -> dict[str, int]:
    """Row counts of the tables retention bounds (the soak reports them first vs last)."""
    sizes = {rule.name: rule.model._default_manager.count() for rule in retention_rules(now=timezone.now())}
    sizes["budget samples"] = BudgetSample.objects.count()
    return sizes


def _stale_below(rule: RetentionRule) -> QuerySet[Model]:
    """The stale rows, bounded above by the first recent id where ids follow time.

    Why: the batch query walks the primary key upwards and filters on the unindexed time
    column; once the stale rows are gone, the last batch would read every recent row to find
    none. The first recent id (an upward walk through the stale rows only, which this run
    deletes anyway) ends that walk. The time filter stays: a row written by a host with a
    slower clock can carry an older time behind a newer id, and it must not go early.
    """
    rows = rule.model._default_manager.filter(rule.stale)
    if not rule.id_follows:
        return rows
    recent = rule.model._default_manager.exclude(rule.stale).order_by("pk").values_list("pk", flat=True)
    first_recent = recent.first()
    return rows if first_recent is None else rows.filter(pk__lt=first_recent)


def _days(days: float) -> timedelta:
    return timedelta(days=float(days))
