"""Stuck recovery with job leases: a GENERATING row whose lease is gone comes back as soon as
it is older than the lease TTL; a leased one, a young one, and rows with no lease mechanism
wait for DISPATCH_STUCK_AFTER_S as before."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from orchestrator.failures import recovery
from orchestrator.failures.leases import JobLeases, received_key
from orchestrator.failures.recovery import recover_stuck
from outreach.models import Outreach, OutreachEvent, State
from tests.factories import make_outreach

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _timings(settings: Any) -> None:
    settings.DISPATCH_STUCK_AFTER_S = 600
    settings.GENERATION_LEASE_TTL_S = 30


def _aged(state: State, seconds: float, **fields: Any) -> Outreach:
    return make_outreach(state=state, state_changed_at=timezone.now() - timedelta(seconds=seconds), **fields)


def _recover(client: redis.Redis, refunded: list[str] | None = None) -> int:
    return recover_stuck(
        now=timezone.now(), refund=(refunded if refunded is not None else []).append, leases=client
    )


def test_generating_row_without_a_lease_is_requeued_at_once(redis_client: redis.Redis) -> None:
    # given a row GENERATING for 40 s (past the 30 s TTL, far from 600 s) whose worker died
    orphan = _aged(State.GENERATING, 40, reservation_id="res-1")
    refunded: list[str] = []
    # when recovery runs
    recovered = _recover(redis_client, refunded)
    # then it is back in the queue, the attempt charged and the reservation refunded
    assert recovered == 1
    orphan.refresh_from_db()
    assert (orphan.state, orphan.attempts, orphan.reservation_id) == (State.QUEUED, 1, "")
    event = OutreachEvent.objects.get(outreach=orphan, error_class="stuck")
    assert "job lease gone" in event.note
    assert refunded == ["res-1"]


def test_generating_row_with_a_live_lease_is_left_alone(redis_client: redis.Redis) -> None:
    # given a slow job: GENERATING for 5 minutes, its worker still renewing its lease
    slow = _aged(State.GENERATING, 300)
    leases = JobLeases(redis_client, ttl_s=30, renew_s=10)
    leases.take(outreach_id=slow.pk)
    # when recovery runs, then it keeps running
    assert _recover(redis_client) == 0
    slow.refresh_from_db()
    assert slow.state == State.GENERATING
    leases.stop()


def test_young_generating_row_without_a_lease_is_left_alone(redis_client: redis.Redis) -> None:
    # given a row that moved to GENERATING 5 s ago (its job may not have taken its lease yet)
    young = _aged(State.GENERATING, 5)
    # when recovery runs, then it stays
    assert _recover(redis_client) == 0
    young.refresh_from_db()
    assert young.state == State.GENERATING


@pytest.mark.parametrize("state", [State.DISPATCHED, State.SENDING])
def test_rows_without_leases_keep_the_timeout(redis_client: redis.Redis, state: State) -> None:
    # given a DISPATCHED (waiting in the broker) or SENDING row for 40 s, with no lease
    waiting = _aged(state, 40, draft_body="Hello" if state == State.SENDING else "")
    # when recovery runs, then it waits for DISPATCH_STUCK_AFTER_S
    assert _recover(redis_client) == 0
    waiting.refresh_from_db()
    assert waiting.state == state
    # and after the timeout it is recovered as before
    Outreach.objects.filter(pk=waiting.pk).update(state_changed_at=timezone.now() - timedelta(seconds=601))
    assert _recover(redis_client) == 1


def test_leased_row_past_the_timeout_is_still_recovered(redis_client: redis.Redis) -> None:
    # given a job wedged for longer than DISPATCH_STUCK_AFTER_S in a process that still beats
    wedged = _aged(State.GENERATING, 601)
    leases = JobLeases(redis_client, ttl_s=30, renew_s=10)
    leases.take(outreach_id=wedged.pk)
    # when recovery runs, then the timeout backstop takes it
    assert _recover(redis_client) == 1
    wedged.refresh_from_db()
    assert wedged.state == State.QUEUED
    leases.stop()


def test_unreadable_leases_recover_nothing_early() -> None:
    # given an orphan, and a lease store that cannot be reached
    orphan = _aged(State.GENERATING, 40)
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    # when recovery runs, then nothing is taken (the timeout still covers it) and nothing raised
    assert _recover(down) == 0
    orphan.refresh_from_db()
    assert orphan.state == State.GENERATING


@pytest.mark.parametrize("draft", ["", "Hello"])
def test_a_dispatched_row_received_by_a_dead_worker_is_requeued_without_an_attempt(
    redis_client: redis.Redis, draft: str
) -> None:
    # given a row DISPATCHED for 40 s whose message a worker received, then died (mark, no lease)
    orphan = _aged(State.DISPATCHED, 40, reservation_id="res-2" if not draft else "", draft_body=draft)
    redis_client.set(received_key(orphan.pk), "dead-worker")
    refunded: list[str] = []
    # when recovery runs
    assert _recover(redis_client, refunded) == 1
    # then it waits again where it came from (a send: APPROVED), no attempt charged, refunded
    orphan.refresh_from_db()
    assert orphan.state == (State.APPROVED if draft else State.QUEUED)
    assert (orphan.attempts, orphan.reservation_id) == (0, "")
    assert refunded == ([] if draft else ["res-2"])
    # and its mark is gone: its next dispatch starts unreceived
    assert redis_client.exists(received_key(orphan.pk)) == 0


def test_a_dispatched_row_held_by_a_live_worker_is_left_alone(redis_client: redis.Redis) -> None:
    # given a row DISPATCHED for 40 s, received by a worker that still beats
    held = _aged(State.DISPATCHED, 40)
    leases = JobLeases(redis_client, ttl_s=30, renew_s=10)
    leases.receive(outreach_id=held.pk, unsettled=lambda: True)
    # when recovery runs, then it stays
    assert _recover(redis_client) == 0
    held.refresh_from_db()
    assert held.state == State.DISPATCHED
    leases.stop()


def test_live_rows_older_than_the_lease_ttl_are_not_read_whole(redis_client: redis.Redis) -> None:
    """Under a backlog many in-flight rows are older than the lease TTL and nearly all are alive:
    every cycle read up to 500 of them whole, with their leads, to find none to recover."""
    # given a backlog: rows DISPATCHED 40 s ago waiting in the broker (no worker received them)
    # and a slow job GENERATING for 5 minutes whose worker renews its lease
    waiting = [_aged(State.DISPATCHED, 40) for _ in range(5)]
    slow = _aged(State.GENERATING, 300)
    leases = JobLeases(redis_client, ttl_s=30, renew_s=10)
    leases.take(outreach_id=slow.pk)
    # when recovery runs
    with CaptureQueriesContext(connection) as queries:
        recovered = _recover(redis_client)
    leases.stop()
    # then nothing is recovered, and no statement read a row's columns or its lead
    assert recovered == 0
    assert {row.state for row in Outreach.objects.filter(pk__in=[w.pk for w in waiting])} == {
        State.DISPATCHED
    }
    read = [q["sql"] for q in queries.captured_queries]
    assert read
    assert not [sql for sql in read if '"outreach_lead"' in sql or '"draft_body"' in sql]
    # and the candidates of all three ways to be stuck came in one statement (until 2026-12-07,
    # three: ~3 ms a dispatch cycle, most of it building them)
    assert len(read) == 1


def test_a_row_that_moves_after_it_was_seen_is_not_recovered(redis_client: redis.Redis) -> None:
    # given a row GENERATING for 40 s without a lease, whose job finishes (the row moves on)
    # between recovery's read of the candidates and its load of the rows
    orphan = _aged(State.GENERATING, 40)
    real = recovery._worker_gone

    def finishes_meanwhile(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        Outreach.objects.filter(pk=orphan.pk).update(state=State.QUEUED, state_changed_at=timezone.now())
        return found

    recovery._worker_gone = finishes_meanwhile
    try:
        # when recovery runs
        recovered = _recover(redis_client)
    finally:
        recovery._worker_gone = real
    # then it leaves the row where its job put it, charging no attempt
    assert recovered == 0
    orphan.refresh_from_db()
    assert (orphan.state, orphan.attempts) == (State.QUEUED, 0)
