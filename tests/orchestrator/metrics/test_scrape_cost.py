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
from prometheus_client.parser import text_string_to_metric_families

from nurture.review import draft_approve
from orchestrator.metrics.prometheus import CACHE_KEY
from outreach.models import Outreach, ReplyClass, State
from outreach.transitions import transition
from tests.factories import make_draft, make_outreach, make_user

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


# The rate limiter's own 60 s window: what the LLM budget holds now (a gauge of now, read from
# Redis), not a window of history computed by the scrape.
BUDGET_WINDOW = {
    "llm_budget_requests_in_window",
    "llm_budget_tokens_in_window",
    "llm_deployment_requests_in_window",
    "llm_deployment_tokens_in_window",
}


def test_a_scrape_exposes_no_window_figure(redis_client: redis.Redis) -> None:
    # given an owner with an email sent, a reply of each triage class decided
    sent = make_outreach(state=State.SENDING)
    transition(outreach_id=sent.pk, from_=State.SENDING, to=State.SENT)
    for code in ReplyClass.values:
        reply = make_draft(lead=sent.lead, kind=Outreach.Kind.REPLY, reply_class=code)
        draft_approve(outreach=reply, by=make_user(f"ops-{code}"))
    # when scraped
    text = _scrape().decode()
    families = list(text_string_to_metric_families(text))
    # then no family is a window (by name, or by a `period` label), nor any of the removed ones
    windows = {f.name for f in families if "window" in f.name} - BUDGET_WINDOW
    assert windows == set()
    assert [s.name for f in families for s in f.samples if "period" in s.labels] == []
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
        "outreach_owner_sent",
        "outreach_owner_dispatched",
        "outreach_window_replies",
        "outreach_window_reply_approved",
        "outreach_window_reply_rejected",
        "outreach_reply_approval_ratio",
    ):
        assert f"\n{window_family}" not in text.replace(f"\n{window_family}_total", ""), window_family
    # and their PromQL replacements are counters: increase(outreach_sent_total[24h]), ...
    assert "\noutreach_sent_total " in text
    assert "\noutreach_owner_sent_total{" in text
    assert "\noutreach_reply_drafts_decided_total{" in text
