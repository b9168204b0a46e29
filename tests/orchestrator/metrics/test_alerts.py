"""Alerts (orchestrator.metrics.alerts, raised through orchestrator.notify): the conditions on plain facts, and the webhook delivered to a
real local HTTP server, once per condition per interval, across failures."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.utils import timezone

from config.celery import app
from config.queues import Queue
from config.worker_presence import presence_record
from devtools.webhook_sink import WebhookSink
from orchestrator.metrics.alerts import AlertFacts, AlertRules, alerts_check, alerts_due
from orchestrator.models import BudgetSample, DeadLetter
from orchestrator.notify import alert_raise
from outreach.models import ErrorClass, State
from tests.factories import make_outreach
from tests.orchestrator.metrics_helpers import dead_letter_row, event

RULES = AlertRules(dead_letters_open=2, dead_letter_age_s=3600, window_s=600, idle_below=0.2)
CALM = AlertFacts(
    dead_letters_open=2,
    oldest_dead_letter_age_s=3600,
    provider_429s=0,
    last_429_age_s=601,
    ready_waiting_s=599,
    budget_used=0.1,
)


@pytest.mark.parametrize(
    ("changes", "conditions"),
    [
        ({}, []),  # every figure exactly at its threshold: nothing is due
        ({"dead_letters_open": 3}, ["dead-letters-open"]),
        ({"oldest_dead_letter_age_s": 3601}, ["dead-letter-age"]),
        ({"provider_429s": 1}, ["provider-429"]),
        ({"last_429_age_s": 600}, ["provider-429"]),
        ({"ready_waiting_s": 600}, ["budget-idle"]),
        ({"ready_waiting_s": 600, "budget_used": 0.2}, []),  # busy enough
        ({"ready_waiting_s": 600, "budget_used": None}, []),  # no samples: the dispatcher says nothing
        ({"ready_waiting_s": None, "budget_used": 0.0}, []),  # nothing ready
        ({"queues": {"reply": (3, 0), "send": (0, 0), "generation": (9, 1)}}, ["queue-unconsumed-reply"]),
        ({"workers_unheard_s": {"reply": 61, "send": 60, "generation": 5}}, ["worker-absent-reply"]),
        ({"workers_unheard_s": {"dead_letter": None}}, ["worker-absent-dead_letter"]),  # never heard
    ],
)
def test_alerts_due_on_facts(changes: dict[str, Any], conditions: list[str]) -> None:
    facts = AlertFacts(**{**CALM.__dict__, **changes})
    assert [a.condition for a in alerts_due(facts, RULES)] == conditions


@pytest.fixture
def sink(settings: Any, redis_client: redis.Redis) -> Iterator[WebhookSink]:
    receiver = WebhookSink().start()
    settings.ALERT_WEBHOOK_URL = receiver.url
    settings.ALERT_INTERVAL_SECONDS = 3600
    yield receiver
    receiver.stop()


def test_a_condition_is_sent_once_per_interval(sink: WebhookSink) -> None:
    assert alert_raise(condition="config-fault", text="LLM_API_KEY was refused") is True
    assert alert_raise(condition="config-fault", text="LLM_API_KEY was refused") is False
    assert alert_raise(condition="auto-pause", text="owner 3 paused") is True  # another condition
    assert sink.received == [
        {"text": "[outreach] LLM_API_KEY was refused"},
        {"text": "[outreach] owner 3 paused"},
    ]


def test_the_interval_ends(sink: WebhookSink, settings: Any, redis_client: redis.Redis) -> None:
    settings.ALERT_INTERVAL_SECONDS = 1
    alert_raise(condition="c", text="first")
    assert 0 < redis_client.ttl("alert:c") <= 1
    redis_client.delete("alert:c")  # as the expiry does
    alert_raise(condition="c", text="second")
    assert sink.texts() == ["[outreach] first", "[outreach] second"]


def test_a_failed_delivery_is_logged_and_does_not_use_the_interval(
    sink: WebhookSink, caplog: pytest.LogCaptureFixture
) -> None:
    # given a receiver answering 500
    sink.status = 500
    with caplog.at_level(logging.ERROR, logger="orchestrator.notify"):
        assert alert_raise(condition="c", text="try 1") is False
    assert "webhook delivery failed: HTTP Error 500" in caplog.text
    # when it recovers, the next raise in the same interval is delivered
    sink.status = 200
    assert alert_raise(condition="c", text="try 2") is True
    assert sink.texts() == ["[outreach] try 1", "[outreach] try 2"]


def test_an_unreachable_receiver_never_fails_the_check(settings: Any, redis_client: redis.Redis) -> None:
    stopped = WebhookSink().start()
    settings.ALERT_WEBHOOK_URL = stopped.url
    stopped.stop()
    assert alert_raise(condition="c", text="nobody listens") is False
    assert redis_client.get("alert:c") is None


def test_without_a_webhook_alerts_are_only_logged_once_per_interval(
    settings: Any, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    settings.ALERT_WEBHOOK_URL = ""
    with caplog.at_level(logging.WARNING, logger="orchestrator.notify"):
        assert alert_raise(condition="c", text="only a log line") is False
        assert alert_raise(condition="c", text="only a log line") is False
    assert caplog.text.count("alert c: only a log line") == 1


@pytest.mark.django_db
def test_the_check_sends_each_condition_that_holds(
    sink: WebhookSink, settings: Any, redis_client: redis.Redis
) -> None:
    sink_redis = redis_client
    # given three open dead letters, the oldest two days old, a 429 retry and idle ready work
    settings.ALERT_DEAD_LETTERS_OPEN, settings.ALERT_IDLE_MINUTES = 2, 10
    now = timezone.now()
    for _ in range(3):
        dead_letter_row(make_outreach(state=State.DEAD), failure_class=ErrorClass.POLICY, reason="bad link")
    oldest = DeadLetter.objects.order_by("pk").values_list("pk", flat=True)[:1]
    DeadLetter.objects.filter(pk__in=list(oldest)).update(created_at=now - timedelta(days=2))
    retried = make_outreach(state=State.QUEUED, not_before=now + timedelta(minutes=1))
    event(
        retried,
        State.GENERATING,
        State.QUEUED,
        at=now - timedelta(minutes=1),
        error_class=ErrorClass.RATE_LIMITED,
    )
    make_outreach(state=State.QUEUED, not_before=now - timedelta(minutes=15))
    for queue in Queue:  # every worker kind runs
        presence_record(
            client=sink_redis, node=f"{queue.value}@host", queues=[queue.value], now=now.timestamp()
        )
    for minute in range(1, 10):
        BudgetSample.objects.create(
            at=now - timedelta(minutes=minute), requests=5, tokens=0, limit_rpm=300, limit_tpm=1,
            effective_rpm=300, effective_tpm=1,
        )  # fmt: skip
    # when the check runs twice
    first = alerts_check(now=now)
    second = alerts_check(now=now)
    # then each condition was sent once
    assert first == ["dead-letters-open", "dead-letter-age", "provider-429", "budget-idle"]
    assert second == []
    texts = sink.texts()
    assert len(texts) == 4
    assert "3 dead letters are open" in texts[0]
    assert "waited 48.0 h" in texts[1]
    assert "1 jobs sent back in the last 10 min" in texts[2]
    assert "ready for 15 min while the LLM budget used 2% of its limit" in texts[3]


@pytest.mark.django_db
def test_the_check_names_a_queue_with_messages_and_no_worker(
    sink: WebhookSink, redis_client: redis.Redis
) -> None:
    # given every worker kind running but reply's, and two reply jobs on the broker (the test Redis)
    now = timezone.now()
    for queue in Queue:
        if queue is not Queue.REPLY:
            presence_record(
                client=redis_client, node=f"{queue.value}@host", queues=[queue.value], now=now.timestamp()
            )
    for outreach_id in (1, 2):
        app.send_task("nurture.generate_reply", args=[outreach_id], queue=Queue.REPLY.value)
    # when the check runs; then the queue and the absent worker kind are named
    assert alerts_check(now=now) == ["queue-unconsumed-reply", "worker-absent-reply"]
    assert sink.texts() == [
        "[outreach] The reply queue holds 2 messages and no worker consumes it: start the reply worker of the Procfile.",
        "[outreach] No reply worker has reported (never): its queue waits until one runs.",
    ]


def test_with_redis_unreachable_the_alert_still_goes_out(sink: WebhookSink, settings: Any) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    assert alert_raise(condition="c", text="budget store down") is True
    assert sink.texts() == ["[outreach] budget store down"]


def test_the_check_is_scheduled_off_the_dispatch_queue(settings: Any) -> None:
    entry = settings.CELERY_BEAT_SCHEDULE["alerts-check"]
    assert entry["task"] == "orchestrator.alerts_check"
    assert entry["options"]["queue"] == "dead_letter"  # a hanging webhook never delays a dispatch cycle
    assert entry["schedule"] == settings.ALERT_CHECK_INTERVAL_S == 60
