"""A real worker says which queue it consumes (config.worker_presence.PresenceStep): /metrics
counts it while it runs, and as absent once it stops, which OutreachWorkerAbsent alerts on."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
from django.contrib import admin
from django.test import Client
from django.urls import include, path, reverse
from prometheus_client.parser import text_string_to_metric_families

from config.queues import Queue
from devtools.processes import ProcessGroup, celery_worker

urlpatterns = [path("", include("backoffice.urls")), path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.urls(__name__)]


def _workers() -> dict[str, float]:
    text = Client().get(reverse("orchestrator:metrics")).content.decode()
    return {
        s.labels["queue"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "outreach_celery_workers"
    }


def _until(check: Callable[[dict[str, float]], bool], *, timeout_s: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout_s
    while True:
        workers = _workers()
        if check(workers) or time.monotonic() > deadline:
            return workers
        time.sleep(0.2)


def test_a_running_reply_worker_is_counted_and_a_stopped_one_is_absent(stack: ProcessGroup) -> None:
    # given no worker: every worker kind of the recipe reads 0
    assert _workers() == dict.fromkeys((q.value for q in Queue), 0)
    # when a reply worker starts
    stack.start("worker-reply", celery_worker(Queue.REPLY, concurrency=1))
    # then it is counted, and only under its queue
    workers = _until(lambda w: w["reply"] == 1, timeout_s=30)
    assert workers == {**dict.fromkeys((q.value for q in Queue), 0), "reply": 1}
    # and once it stops (SIGTERM: a deploy), it reads absent again
    stack.kill("worker-reply", signal.SIGTERM)
    assert _until(lambda w: w["reply"] == 0, timeout_s=20)["reply"] == 0
