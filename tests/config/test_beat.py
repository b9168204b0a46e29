"""The dispatch entry as django-celery-beat really stores and sends it, and beat's liveness."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from django_celery_beat.models import PeriodicTask

from config.beat import HeartbeatScheduler
from config.celery import app
from config.liveness import beat_alive

pytestmark = pytest.mark.django_db(transaction=True)  # the scheduler closes connections outside autocommit


def test_dispatch_entry_expires_after_one_interval_as_read_back_from_the_scheduler(settings: Any) -> None:
    # given the scheduler the beat process runs, loading CELERY_BEAT_SCHEDULE into its tables
    scheduler = HeartbeatScheduler(app=app, lazy=False)
    # then the stored task keeps the expiry (django-celery-beat drops a plain `expires` option)
    stored = PeriodicTask.objects.get(name="dispatch-cycle")
    assert stored.expire_seconds == settings.DISPATCH_INTERVAL
    assert stored.interval.every == settings.DISPATCH_INTERVAL
    # and the entry it sends from carries it, so a cycle message older than one interval expires
    entry = scheduler.schedule["dispatch-cycle"]
    assert entry.options["expires"] == settings.DISPATCH_INTERVAL
    assert entry.options["queue"] == "orchestrator"


def test_beat_touches_its_heartbeat_file_on_each_tick(tmp_path: Path, settings: Any) -> None:
    settings.BEAT_HEARTBEAT_FILE = str(tmp_path / "beat.heartbeat")
    scheduler = HeartbeatScheduler(app=app, lazy=False)
    scheduler.tick()
    assert beat_alive(heartbeat_file=tmp_path / "beat.heartbeat", now=time.time()) is None


def test_beat_liveness_says_why_it_is_not_alive(tmp_path: Path) -> None:
    heartbeat = tmp_path / "beat.heartbeat"
    assert "has not ticked yet" in str(beat_alive(heartbeat_file=heartbeat, now=time.time()))
    ticked = time.time()
    heartbeat.write_text(f"{ticked}\n")  # as beat writes it (config.beat)
    assert "last tick was 120 s ago" in str(beat_alive(heartbeat_file=heartbeat, now=ticked + 120))
    heartbeat.write_text("garbage")
    assert "holds no time" in str(beat_alive(heartbeat_file=heartbeat, now=ticked))


def test_retention_prune_is_scheduled_daily_on_the_orchestrator_queue(settings: Any) -> None:
    scheduler = HeartbeatScheduler(app=app, lazy=False)
    stored = PeriodicTask.objects.get(name="retention-prune")
    assert stored.task == "orchestrator.prune"
    assert stored.interval.every == settings.RETENTION_PRUNE_INTERVAL_S == 86_400
    assert scheduler.schedule["retention-prune"].options["queue"] == "orchestrator"
