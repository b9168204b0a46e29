"""What a scrape of /metrics costs: the platform's text comes from a short cache in Redis
(METRICS_CACHE_S, shared by every web process and replica), and no scrape computes a window of
history (rates and windows are PromQL's, over the counters)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.contrib import admin
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import include, path, reverse

from orchestrator.metrics.prometheus import CACHE_KEY
from outreach.models import State
from tests.factories import make_outreach

urlpatterns = [path("", include("backoffice.urls")), path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]


def _scrape() -> bytes:
    response = Client().get(reverse("orchestrator:metrics"))
    assert response.status_code == 200
    return response.content


def test_a_second_scrape_within_the_cache_time_reads_no_database(
    redis_client: redis.Redis, settings: Any
) -> None:
    # given a scrape with one queued row, the cache on for 5 s
    settings.METRICS_CACHE_S = 5
    make_outreach(state=State.QUEUED)
    first = _scrape()
    assert b'outreach_state_rows{state="queued"} 1.0' in first
    assert 0 < redis_client.pttl(CACHE_KEY) <= 5000
    # when another row is queued and another process scrapes within the 5 s
    make_outreach(state=State.QUEUED)
    with CaptureQueriesContext(connection) as queries:
        second = _scrape()
    # then it is served the same text, without one query
    assert second == first
    assert len(queries) == 0
    # and once the entry is gone (expired), the next scrape reads afresh
    redis_client.delete(CACHE_KEY)
    assert b'outreach_state_rows{state="queued"} 2.0' in _scrape()


def test_with_the_cache_off_every_scrape_reads_afresh(redis_client: redis.Redis, settings: Any) -> None:
    settings.METRICS_CACHE_S = 0
    make_outreach(state=State.QUEUED)
    _scrape()
    make_outreach(state=State.QUEUED)
    assert b'outreach_state_rows{state="queued"} 2.0' in _scrape()
    assert not redis_client.exists(CACHE_KEY)


def test_a_scrape_exposes_no_window_figure(redis_client: redis.Redis) -> None:
    text = _scrape().decode()
    for window_family in (
        "outreach_window_seconds",
        "outreach_window_sent",
        "outreach_window_dead",
        "outreach_window_completed",
        "outreach_latency_seconds",
        "outreach_success_ratio",
        "outreach_retry_ratio",
        "outreach_dead_letter_ratio",
        "outreach_approval_ratio",
        "outreach_time_to_approval_seconds",
    ):
        assert f"\n{window_family}" not in text, window_family
    assert "\noutreach_sent_total " in text  # its PromQL replacement: increase(outreach_sent_total[24h])
