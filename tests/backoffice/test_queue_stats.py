"""`manage.py queue_stats [--json]` against a known database state."""

from __future__ import annotations

import io
import json
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.utils import timezone

from orchestrator.budget import Budget, Limits
from orchestrator.dispatch.inflight import call_latency_record
from outreach.models import ErrorClass, Outreach, State
from tests.factories import make_outreach
from tests.orchestrator.metrics_helpers import dead_letter_row, event, outreach_at

pytestmark = pytest.mark.django_db

S = State
CONTRACT_KEYS = {
    "states",
    "tiers",
    "oldest_queued_age_s",
    "sent",
    "dead_letters",
    "retries",
    "provider_429s",
    "llm_requests",
}


@pytest.fixture
def known_state(redis_client: redis.Redis) -> None:
    """3 queued intros (oldest ready for 5 min), 1 queued reply, 2 sent (one after a transient retry
    and a 429), 1 dead with its dead letter, 1 awaiting approval; 7 LLM calls recorded."""
    now = timezone.now()
    for minutes in (5, 2, 1):
        make_outreach(kind=Outreach.Kind.INTRO, not_before=now - timedelta(minutes=minutes))
    make_outreach(kind=Outreach.Kind.REPLY, not_before=now - timedelta(seconds=10))
    sent = outreach_at(created_at=now - timedelta(hours=1), state=S.SENT, llm_calls=3, tokens_used=900)
    event(sent, S.GENERATING, S.QUEUED, at=now - timedelta(minutes=50), error_class=ErrorClass.TRANSIENT)
    event(sent, S.GENERATING, S.QUEUED, at=now - timedelta(minutes=45), error_class=ErrorClass.RATE_LIMITED)
    event(sent, S.GENERATING, S.DISPATCHED, at=now - timedelta(minutes=40))
    event(sent, S.SENDING, S.SENT, at=now - timedelta(minutes=39))
    other = outreach_at(created_at=now - timedelta(hours=1), state=S.SENT, llm_calls=4, tokens_used=1100)
    event(other, S.GENERATING, S.DISPATCHED, at=now - timedelta(minutes=30))
    event(other, S.SENDING, S.SENT, at=now - timedelta(minutes=29))
    dead = outreach_at(created_at=now - timedelta(hours=1), state=S.DEAD)
    event(dead, S.GENERATING, S.DEAD, at=now - timedelta(minutes=20), error_class=ErrorClass.PERMANENT)
    dead_letter_row(dead, failure_class=ErrorClass.PERMANENT, reason="400 bad request")
    make_outreach(state=S.AWAITING_APPROVAL)


def _stats(*args: str) -> str:
    out = io.StringIO()
    call_command("queue_stats", *args, stdout=out)
    return out.getvalue()


def test_json_has_the_contract_keys_with_the_known_figures(known_state: None, settings: Any) -> None:
    data = json.loads(_stats("--json"))
    assert set(data) >= CONTRACT_KEYS
    assert data["states"] == {
        "queued": 4,
        "dispatched": 0,
        "generating": 0,
        "awaiting_approval": 1,
        "approved": 0,
        "sending": 0,
        "sent": 2,
        "rejected": 0,
        "cancelled": 0,
        "dead": 1,
    }
    assert data["tiers"]["intro"]["queued"] == 3
    assert data["tiers"]["reply"]["queued"] == 1
    assert data["tiers"]["intro"]["awaiting_approval"] == 1
    assert data["oldest_queued_age_s"] == pytest.approx(300, abs=5)
    assert (data["sent"], data["dead_letters"], data["retries"], data["provider_429s"]) == (2, 1, 1, 1)
    assert data["llm_requests"] == 7


def test_json_carries_the_dashboard_figures(known_state: None) -> None:
    data = json.loads(_stats("--json"))
    assert data["window_s"] == 86_400
    assert data["latency_s"]["intro"]["count"] == 2
    assert data["rates"]["retry"] == pytest.approx(0.5)
    assert data["rates"]["dead_letter"] == pytest.approx(1 / 3)
    assert data["success_by_kind"]["intro"] == {"completed": 2, "dead": 1, "rate": pytest.approx(2 / 3)}
    assert data["tokens"]["per_completed"] == pytest.approx(1000)
    assert data["dead_letter_classes"][0]["failure_class"] == "permanent"
    assert data["dead_letter_classes"][0]["samples"][0]["reason"] == "400 bad request"
    assert data["budget"]["now"]["redis"] == "ok"
    assert {o["owner_id"] for o in data["owners"]} >= {o.owner_id for o in Outreach.objects.all()}


def test_empty_database_still_lists_every_state_with_zero(redis_client: redis.Redis) -> None:
    data = json.loads(_stats("--json"))
    assert set(data["states"]) == set(State.values)
    assert set(data["states"].values()) == {0}
    assert data["oldest_queued_age_s"] is None
    assert (
        data["sent"],
        data["dead_letters"],
        data["retries"],
        data["provider_429s"],
        data["llm_requests"],
    ) == (
        0,
        0,
        0,
        0,
        0,
    )


def test_human_output_is_a_readable_table(known_state: None) -> None:
    text = _stats()
    assert "Queue at" in text
    assert "awaiting_approval" in text
    assert "Share per owner" in text
    assert "400 bad request" in text
    assert "LLM now: used / effective / limit rpm" in text


def test_budget_figures_come_from_the_shared_budget(redis_client: redis.Redis, settings: Any) -> None:
    # the command reads the process budget (settings); a call in its window shows up as use
    settings.LLM_RPM = 300
    budget = Budget(redis_client=redis_client, limits=Limits(rpm=300, tpm=300_000, burst_ms=4_000))
    budget.acquire_call(tokens=50)
    data = json.loads(_stats("--json"))
    assert data["budget"]["now"]["requests_in_window"] >= 1


def test_in_flight_against_the_target_and_step_latency_are_shown(
    redis_client: redis.Redis, settings: Any
) -> None:
    # given two outreach holding LLM reservations and provider calls observed per step
    settings.DISPATCH_INTERVAL, settings.DISPATCH_MAX_IN_FLIGHT = 2.0, 1000
    make_outreach(state=S.DISPATCHED)
    make_outreach(state=S.GENERATING)
    for step, seconds in (("plan", 1.0), ("context", 2.0), ("message", 3.0)):
        for _ in range(10):
            call_latency_record(step=step, seconds=seconds)
    # when an operator asks for the figures
    data = json.loads(_stats("--json"))["in_flight"]
    text = _stats()
    # then they show the count, the target it is held to and what the target is sized on
    assert data["in_flight"] == 2
    assert data["cap"] == 1000
    assert 1 <= data["target"] <= 1000
    assert data["job_latency_s"] == pytest.approx(1.0 + 2.0 + 3.0 + 2.0)
    assert data["latency"]["message"] == {"count": 10, "p50_s": 3.0, "p95_s": 3.0}
    assert f"2 / {data['target']} / 1000" in text
    assert "3.0 s / 3.0 s (10)" in text
