"""Metric labels are bounded enumerations: why queued work waits is exposed on /metrics as a
reason code, never as the text on the row (a pause's reason is whatever a person typed, and
it names who paused)."""

from __future__ import annotations

from datetime import UTC, datetime, time
from decimal import Decimal

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.budget.sends import day_cap_reason
from orchestrator.controls.pauses import pause
from orchestrator.controls.spend import spend_cap_reason
from orchestrator.dispatch.owner_limits import OwnerRules, owner_capacity
from orchestrator.metrics.depth import DEFERRED_REASON_CODES, deferred_reason_code
from orchestrator.metrics.prometheus import metrics_registry
from tests.factories import make_lead, make_outreach, make_owner, make_user

# (the text a waiting row says, its code): written out by hand, one per producer of that text.
REASONS = [
    ("paused by alice at 2026-11-23 09:00 UTC (owner Ann): Bob asked us to stop", "paused"),
    ("paused automatically at 2026-11-23 09:00 UTC (sender domain example.com)", "paused"),
    ("daily spend cap $5.00 reached, resumes 00:00 UTC", "spend_cap"),
    ("organization LLM cap reached (org:3)", "llm_cap"),
    ("outside operating hours 09:00-17:00, resumes 09:00 Europe/Berlin", "operating_hours"),
    ("daily limit 50 reached, resumes Mon 09:00 UTC", "owner_daily_limit"),
    ("send rate 20/s reached", "send_rate"),
    ("sender domain example.com: 200/day reached (warm-up day 3), resumes 00:00 UTC", "sender_domain_day"),
    ("send budget unavailable (Redis down, closed policy)", "send_budget_unavailable"),
    ("deployment 'main#0' misconfigured: 401 invalid_api_key; check LLM_DEPLOYMENTS", "deployment"),
    ("deployment 'main#0' failing: 500; its work goes to its pool or fallback", "deployment"),
    ("waiting for step 1 to be sent", "sequence"),
    ("anything else someone wrote, e.g. call Bob on 555-0100", "other"),
    ("", "other"),
]


@pytest.mark.parametrize(("text", "code"), REASONS)
def test_each_waiting_reason_maps_to_its_code(text: str, code: str) -> None:
    assert deferred_reason_code(text) == code


def test_the_codes_are_a_fixed_set() -> None:
    assert set(DEFERRED_REASON_CODES) == {code for _, code in REASONS}


@pytest.mark.django_db
def test_the_texts_the_product_writes_map_to_their_codes() -> None:
    # the producers themselves, so a change of wording cannot silently fall to "other"
    rules = OwnerRules(
        owner_id=1,
        timezone="UTC",
        daily_limit=1,
        hours_start=time(9),
        hours_end=time(17),
        working_days="12345",
    )
    monday_night = datetime(2026, 11, 23, 20, 0, tzinfo=UTC)
    monday_noon = monday_night.replace(hour=12)
    owner = make_owner(name="Ann")
    stop, _ = pause(owner=owner, by=make_user("alice"), reason="Bob asked us to stop")
    assert [
        deferred_reason_code(text)
        for text in (
            stop.blocked_reason(),
            spend_cap_reason(Decimal("5")),
            day_cap_reason(domain="example.com", cap=200, warmup_day=3),
            owner_capacity(rules=rules, now=monday_night, used_today=0).blocked_reason,
            owner_capacity(rules=rules, now=monday_noon, used_today=1).blocked_reason,
        )
    ] == ["paused", "spend_cap", "sender_domain_day", "operating_hours", "owner_daily_limit"]


@pytest.mark.django_db
def test_a_pause_with_a_free_text_reason_yields_only_a_known_label_value() -> None:
    # given queued work waiting on a pause whose reason names people
    owner = make_owner(name="Owner of the queue")
    stop, _ = pause(owner=owner, by=make_user("alice.smith"), reason="Bob Jones asked us to stop")
    for _ in range(2):
        make_outreach(lead=make_lead(owner=owner), blocked_reason=stop.blocked_reason())
    make_outreach(blocked_reason="send rate 20/s reached")
    # when /metrics is scraped
    text = generate_latest(metrics_registry()).decode()
    # then outreach_deferred_rows carries reason codes only, counted per code
    [family] = [f for f in text_string_to_metric_families(text) if f.name == "outreach_deferred_rows"]
    assert {s.labels["reason"]: s.value for s in family.samples} == {"paused": 2.0, "send_rate": 1.0}
    # and no label of any metric holds the pause's text, the person who paused or the reason
    values = {v for f in text_string_to_metric_families(text) for s in f.samples for v in s.labels.values()}
    assert not [v for v in values if "alice.smith" in v or "Bob Jones" in v or "paused by" in v]
