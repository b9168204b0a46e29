"""The retention prune (orchestrator.controls.retention): old rows go, recent ones stay, in bounded batches."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from django.contrib.sessions.models import Session
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from orchestrator.controls.retention import retention_prune, table_sizes
from orchestrator.models import DeadLetter
from orchestrator.tasks import prune
from outreach.models import (
    AssignmentBatch,
    AssignmentItem,
    ErrorClass,
    Outreach,
    OutreachEvent,
    State,
    UnverifiedInbound,
)
from tests.factories import make_org, make_outreach, make_owner
from tests.orchestrator.metrics_helpers import dead_letter_row, event

pytestmark = pytest.mark.django_db

NOW = timezone.now()
DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _ages(settings: Any) -> None:
    settings.METRICS_WINDOW_S = 86_400
    settings.RETENTION_EVENTS_DAYS = 10
    settings.RETENTION_DEAD_LETTERS_DAYS = 5
    settings.RETENTION_ASSIGNMENT_ITEMS_DAYS = 3
    settings.RETENTION_UNVERIFIED_INBOUND_DAYS = 7
    settings.RETENTION_BATCH_ROWS = 5000


def _deletes(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("DELETE")]


def _events(outreach: Outreach, *ages: timedelta) -> list[OutreachEvent]:
    # oldest first: in production ids grow with `at`
    return [
        event(outreach, State.QUEUED, State.DISPATCHED, at=NOW - age) for age in sorted(ages, reverse=True)
    ]


def test_outreach_events_older_than_their_retention_are_pruned_and_recent_ones_kept() -> None:
    # given events 30, 11 and 9 days old and one from this hour (retention: 10 days)
    outreach = make_outreach(state=State.DISPATCHED)
    _, _, kept, recent = _events(outreach, 30 * DAY, 11 * DAY, 9 * DAY, timedelta(minutes=5))
    # when the prune runs
    report = retention_prune(now=NOW)
    # then the two past retention are gone, the rest stay
    assert set(OutreachEvent.objects.values_list("pk", flat=True)) == {kept.pk, recent.pk}
    assert report.deleted["outreach events"] == 2
    assert report.finished


def test_events_inside_the_metrics_window_are_kept_whatever_the_retention(settings: Any) -> None:
    # given a retention shorter than the dashboard's window (settings refuse it at start; a
    # change at run time must not falsify the window's figures either)
    settings.RETENTION_EVENTS_DAYS = 0.01
    settings.METRICS_WINDOW_S = 2 * 86_400
    outreach = make_outreach(state=State.DISPATCHED)
    _, inside, _ = _events(outreach, 3 * DAY, 47 * timedelta(hours=1), timedelta(hours=1))
    # when the prune runs, then only the event older than the window goes
    assert retention_prune(now=NOW).deleted["outreach events"] == 1
    assert OutreachEvent.objects.filter(pk=inside.pk).exists()
    assert OutreachEvent.objects.count() == 2


def test_only_resolved_dead_letters_past_retention_are_pruned() -> None:
    # given dead letters: replayed and cancelled a week ago, replayed yesterday, open and
    # escalated for a month (an operator still owes them a decision)
    outreach = make_outreach(state=State.DEAD)
    week_ago, yesterday, month_ago = NOW - 7 * DAY, NOW - DAY, NOW - 30 * DAY
    gone = [
        _letter(outreach, status=DeadLetter.Status.REPLAYED, resolved_at=week_ago),
        _letter(outreach, status=DeadLetter.Status.CANCELLED, resolved_at=week_ago),
    ]
    kept = [
        _letter(outreach, status=DeadLetter.Status.REPLAYED, resolved_at=yesterday),
        _letter(outreach, status=DeadLetter.Status.OPEN, created_at=month_ago),
        _letter(outreach, status=DeadLetter.Status.ESCALATED, resolved_at=month_ago),
    ]
    # when the prune runs
    report = retention_prune(now=NOW)
    # then only the resolved letters past 5 days are gone
    assert report.deleted["dead letters"] == len(gone)
    assert set(DeadLetter.objects.values_list("pk", flat=True)) == {letter.pk for letter in kept}


def test_items_of_assignments_completed_past_retention_are_pruned_and_the_batch_kept() -> None:
    # given an assignment completed 4 days ago, one completed today and one still loading
    done_long_ago = _assignment(completed_at=NOW - 4 * DAY, items=3)
    done_today = _assignment(completed_at=NOW - timedelta(hours=2), items=2)
    loading = _assignment(completed_at=None, items=2, created_at=NOW - 30 * DAY)
    # when the prune runs
    report = retention_prune(now=NOW)
    # then the old assignment's items are gone (PII: names, emails), its summary row stays
    assert report.deleted["assignment items"] == 3
    assert not AssignmentItem.objects.filter(batch=done_long_ago).exists()
    assert AssignmentBatch.objects.filter(pk=done_long_ago.pk).exists()
    assert AssignmentItem.objects.filter(batch=done_today).count() == 2
    assert AssignmentItem.objects.filter(batch=loading).count() == 2


def test_unverified_inbound_older_than_its_retention_is_pruned_held_or_accepted() -> None:
    # given unverified inbound 30 and 8 days old (one held, one accepted) and one 6 days old
    org = make_org()
    rows = [
        UnverifiedInbound.objects.create(
            organization=org,
            key=f"reply:<{n}@x>",
            message_id=f"<{n}@x>",
            sender="m@evil.example",
            reason="spam",
        )
        for n in range(3)
    ]
    for row, age, status in zip(
        rows, (30 * DAY, 8 * DAY, 6 * DAY), ("held", "accepted", "held"), strict=True
    ):
        UnverifiedInbound.objects.filter(pk=row.pk).update(received_at=NOW - age, status=status)
    # when the prune runs (retention: 7 days)
    report = retention_prune(now=NOW)
    # then the two older ones are gone, the recent one stays
    assert report.deleted["unverified inbound"] == 2
    assert list(UnverifiedInbound.objects.values_list("pk", flat=True)) == [rows[2].pk]


def test_expired_sessions_are_pruned_and_live_ones_kept() -> None:
    Session.objects.create(session_key="expired-a", session_data="", expire_date=NOW - timedelta(seconds=1))
    Session.objects.create(session_key="expired-b", session_data="", expire_date=NOW - 30 * DAY)
    Session.objects.create(session_key="live", session_data="", expire_date=NOW + DAY)
    assert retention_prune(now=NOW).deleted["sessions"] == 2
    assert list(Session.objects.values_list("session_key", flat=True)) == ["live"]


def test_each_delete_statement_is_bounded_to_a_batch(settings: Any) -> None:
    # given 7 events past retention, 2 recent ones, and batches of 3 rows
    settings.RETENTION_BATCH_ROWS = 3
    outreach = make_outreach(state=State.DISPATCHED)
    _events(
        outreach, *[20 * DAY + i * timedelta(minutes=1) for i in range(7)], timedelta(minutes=2), timedelta(1)
    )
    # when the prune runs
    with CaptureQueriesContext(connection) as queries:
        report = retention_prune(now=NOW)
    # then the events went in statements of at most 3 rows (3 + 3 + 1), never one big DELETE,
    # each with a LIMIT in the statement itself
    event_deletes = [sql for sql in _deletes(queries) if '"outreach_outreachevent"' in sql.split("WHERE")[0]]
    assert len(event_deletes) == 3
    assert all(re.search(r"LIMIT 3\b", sql) for sql in event_deletes)
    assert report.deleted["outreach events"] == 7
    assert OutreachEvent.objects.count() == 2


def test_a_run_stops_at_its_time_budget_and_says_rows_remain(settings: Any) -> None:
    # given more old rows than one statement takes, and a clock past the budget after one statement
    settings.RETENTION_BATCH_ROWS = 2
    outreach = make_outreach(state=State.DISPATCHED)
    _events(outreach, *[20 * DAY + i * timedelta(minutes=1) for i in range(5)])
    ticks = iter([0.0, 100.0])  # the start, then the check before the second statement
    # when the prune runs with that clock
    report = retention_prune(now=NOW, clock=lambda: next(ticks, 100.0), budget_s=1.0)
    # then it stopped after the first batch and says it is not finished; a second run goes on
    assert (report.deleted["outreach events"], report.finished) == (2, False)
    assert OutreachEvent.objects.count() == 3
    assert retention_prune(now=NOW).finished
    assert OutreachEvent.objects.count() == 0


def test_the_task_prunes(settings: Any) -> None:
    outreach = make_outreach(state=State.DISPATCHED)
    _events(outreach, 20 * DAY, timedelta(minutes=1))
    prune()
    assert OutreachEvent.objects.count() == 1


def test_the_task_queues_its_continuation_on_the_orchestrator_queue_while_rows_remain(
    settings: Any, redis_client: redis.Redis
) -> None:
    # given a backlog larger than one statement and a run budget spent by the first one
    settings.RETENTION_BATCH_ROWS, settings.DISPATCH_INTERVAL = 2, 0
    outreach = make_outreach(state=State.DISPATCHED)
    _events(outreach, *[20 * DAY + i * timedelta(minutes=1) for i in range(5)])
    # when the task runs
    prune()
    # then it made progress (one statement) and queued the next run rather than hold the worker
    assert OutreachEvent.objects.count() == 3
    assert redis_client.llen("orchestrator") == 1


def test_table_sizes_count_the_pruned_tables() -> None:
    outreach = make_outreach(state=State.DEAD)
    _events(outreach, DAY)
    dead_letter_row(outreach, failure_class=ErrorClass.POLICY, reason="x")
    sizes = table_sizes()
    assert sizes["outreach events"] == 1
    assert sizes["dead letters"] == 1
    assert set(sizes) >= {"assignment items", "sessions", "budget samples"}


def _letter(
    outreach: Outreach, *, status: str, created_at: datetime | None = None, **fields: Any
) -> DeadLetter:
    letter = dead_letter_row(outreach, failure_class=ErrorClass.POLICY, reason="bad", status=status, **fields)
    if created_at:
        DeadLetter.objects.filter(pk=letter.pk).update(created_at=created_at)
    return letter


_emails = iter(range(10**6))


def _assignment(
    *, completed_at: datetime | None, items: int, created_at: datetime | None = None
) -> AssignmentBatch:
    org = make_org()
    owner = make_owner(organization=org)
    batch = AssignmentBatch.objects.create(
        organization=org,
        file_name="leads.csv",
        file_sha256="0" * 64,
        rows=items,
        children_total=items,
        children_done=items if completed_at else 0,
        status=AssignmentBatch.Status.COMPLETED if completed_at else AssignmentBatch.Status.LOADING,
        created_at=created_at or completed_at or NOW,
        completed_at=completed_at,
    )
    AssignmentItem.objects.bulk_create(
        AssignmentItem(
            batch=batch, line=i + 2, email=f"p{next(_emails)}@x.example", timezone="UTC", owner=owner
        )
        for i in range(items)
    )
    return batch
