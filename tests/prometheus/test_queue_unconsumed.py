"""A queue nobody consumes, end to end: messages on the real broker's `reply` queue with no reply
worker show on /metrics as ready messages and no consumer, and the shipped alert fires on
exactly those figures (promtool evaluating docs/prometheus/alerts.yml on the scraped values)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from django.contrib import admin
from django.test import Client
from django.urls import include, path, reverse
from prometheus_client.parser import text_string_to_metric_families

from config.celery import app
from config.queues import Queue
from tests.prometheus.conftest import RULES, promtool_run

urlpatterns = [path("", include("backoffice.urls")), path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

QUEUE_FAMILIES = ("outreach_celery_queue_ready_messages", "outreach_celery_queue_consumers")


def _queue_series() -> dict[tuple[str, str], float]:
    response = Client().get(reverse("orchestrator:metrics"))
    assert response.status_code == 200
    return {
        (s.name, s.labels["queue"]): s.value
        for f in text_string_to_metric_families(response.content.decode())
        for s in f.samples
        if s.name in QUEUE_FAMILIES
    }


def test_messages_on_a_queue_without_a_worker_fire_the_queue_alert(
    redis_client: redis.Redis, promtool: str, tmp_path: Path
) -> None:
    # given three reply jobs on the broker (the test Redis, flushed after) and no reply worker
    for outreach_id in (1, 2, 3):
        app.send_task("nurture.generate_reply", args=[outreach_id], queue=Queue.REPLY.value)
    # when /metrics is scraped
    series = _queue_series()
    # then it shows them waiting with no consumer, and the other queues empty
    assert series[("outreach_celery_queue_ready_messages", "reply")] == 3
    assert series[("outreach_celery_queue_consumers", "reply")] == 0
    assert series[("outreach_celery_queue_ready_messages", "send")] == 0
    # and the shipped rule, fed those figures for 3 minutes, fires for the reply queue only
    input_series: list[dict[str, Any]] = [
        {"series": f'{name}{{job="outreach", instance="web-1", queue="{queue}"}}', "values": f"{value:g}x5"}
        for (name, queue), value in series.items()
    ]
    case = {
        "interval": "1m",
        "input_series": input_series,
        "alert_rule_test": [
            {
                "eval_time": "3m",
                "alertname": "OutreachQueueUnconsumed",
                "exp_alerts": [
                    {
                        "exp_labels": {"severity": "critical", "job": "outreach", "queue": "reply"},
                        "exp_annotations": {
                            "summary": "Queue reply holds messages and no worker consumes it",
                            "description": "Start the `reply` worker of the Procfile "
                            '(docs/architecture.md, "Procfile").',
                        },
                    }
                ],
            }
        ],
    }
    test_file = tmp_path / "queue_test.yml"
    test_file.write_text(yaml.safe_dump({"rule_files": [str(RULES)], "tests": [case]}))
    assert "SUCCESS" in promtool_run(promtool, "test", "rules", str(test_file))
