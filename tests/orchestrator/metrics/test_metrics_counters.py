"""/metrics' counters and histograms (outreach.counters): counted by real state changes, never
falling when retention prunes, and every metric the shipped alert rules and Grafana dashboard
use is exposed."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from django.contrib import admin
from django.test import Client
from django.urls import include, path, reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.budget import budget_from_settings
from orchestrator.controls.retention import retention_prune
from orchestrator.failures.dead_letters import dead_letter, dead_letter_cancel
from outreach.counters import call_durations_record
from outreach.models import ErrorClass, Outreach, OutreachEvent, State
from outreach.transitions import transition
from tests.factories import make_outreach, make_user

urlpatterns = [path("", include("backoffice.urls")), path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

DOCS = Path(__file__).resolve().parents[3] / "docs"
S = State
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape() -> tuple[Samples, set[str]]:
    """Every sample, and every exposed name (families, with or without samples, and samples; a
    counter family, whose name the parser gives without `_total`, by its series' name too)."""
    response = Client().get(reverse("orchestrator:metrics"))
    assert response.status_code == 200
    families = list(text_string_to_metric_families(response.content.decode()))
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}
    counters = {f"{f.name}_total" for f in families if f.type == "counter"}
    return samples, {f.name for f in families} | counters | {name for name, _ in samples}


def _work(*, now: Any) -> None:
    """Real moves: a reply written and sent autonomously (40 s after it fell due), an intro
    retried after a 429 and once after a transient error, and one dead-lettered."""
    reply = make_outreach(kind=Outreach.Kind.REPLY, state=S.GENERATING)
    Outreach.objects.filter(pk=reply.pk).update(
        created_at=now - timedelta(seconds=40), not_before=now - timedelta(seconds=40)
    )
    transition(outreach_id=reply.pk, from_=S.GENERATING, to=S.DISPATCHED, llm_calls=3, tokens_used=700)
    transition(outreach_id=reply.pk, from_=S.DISPATCHED, to=S.SENDING)
    transition(outreach_id=reply.pk, from_=S.SENDING, to=S.SENT)
    intro = make_outreach(state=S.GENERATING)
    transition(outreach_id=intro.pk, from_=S.GENERATING, to=S.QUEUED, error_class=ErrorClass.RATE_LIMITED)
    transition(outreach_id=intro.pk, from_=S.QUEUED, to=S.DISPATCHED)
    transition(outreach_id=intro.pk, from_=S.DISPATCHED, to=S.GENERATING)
    transition(outreach_id=intro.pk, from_=S.GENERATING, to=S.QUEUED, error_class=ErrorClass.TRANSIENT)
    transition(outreach_id=intro.pk, from_=S.QUEUED, to=S.DISPATCHED)
    transition(outreach_id=intro.pk, from_=S.DISPATCHED, to=S.GENERATING)
    dead_letter(
        outreach=intro, from_=S.GENERATING, failure_class=ErrorClass.POLICY, reason="x", job_type="generation"
    )
    call_durations_record([("plan", 0.3), ("plan", 7)])


def test_state_changes_are_counted_and_exposed_as_counters_and_histograms(redis_client: redis.Redis) -> None:
    # given real moves
    now = timezone.now()
    _work(now=now)
    # when scraped
    samples, _ = _scrape()
    # then
    assert samples[("outreach_sent_total", ())] == 1
    assert samples[("outreach_generated_total", (("tier", "reply"),))] == 1
    assert samples[("outreach_llm_requests_total", ())] == 3
    assert samples[("outreach_llm_tokens_total", ())] == 700
    assert samples[("outreach_retries_total", ())] == 1
    assert samples[("outreach_provider_429s_total", ())] == 1
    assert samples[("outreach_dead_letters_total", (("class", "policy"),))] == 1
    reply = (("tier", "reply"),)
    assert samples[("outreach_completion_latency_seconds_bucket", (("le", "30.0"), *reply))] == 0
    assert samples[("outreach_completion_latency_seconds_bucket", (("le", "60.0"), *reply))] == 1
    assert samples[("outreach_completion_latency_seconds_bucket", (("le", "+Inf"), *reply))] == 1
    assert samples[("outreach_completion_latency_seconds_count", reply)] == 1
    assert samples[("outreach_completion_latency_seconds_sum", reply)] == pytest.approx(40, abs=2)
    assert samples[("outreach_completion_latency_seconds_count", (("tier", "nudge"),))] == 0  # exists at 0
    plan = (("step", "plan"),)
    assert samples[("outreach_llm_call_duration_seconds_bucket", (("le", "0.5"), *plan))] == 1
    assert samples[("outreach_llm_call_duration_seconds_bucket", (("le", "10.0"), *plan))] == 2
    assert samples[("outreach_llm_call_duration_seconds_sum", plan)] == pytest.approx(7.3)
    assert samples[("outreach_dead_letter_oldest_open_age_seconds", ())] < 60


def test_counters_do_not_fall_when_retention_prunes_history(redis_client: redis.Redis, settings: Any) -> None:
    # given counted work whose history is old enough to prune, and its dead letter resolved
    now = timezone.now()
    _work(now=now)
    letter = Outreach.objects.get(state=S.DEAD).dead_letters.get()
    dead_letter_cancel(dead_letter=letter, by_id=make_user("ops").pk)
    before, _ = _scrape()
    settings.METRICS_WINDOW_S, settings.RETENTION_EVENTS_DAYS, settings.RETENTION_DEAD_LETTERS_DAYS = 60, 0, 0
    OutreachEvent.objects.update(at=now - timedelta(days=1))
    # when retention prunes
    report = retention_prune(now=now + timedelta(seconds=1))
    assert report.deleted["outreach events"] > 0
    assert report.deleted["dead letters"] == 1
    # then no counter fell
    after, _ = _scrape()
    counters = [key for key in before if key[0].endswith(("_total", "_bucket", "_count", "_sum"))]
    assert len(counters) > 20
    assert {key: after[key] for key in counters} == {key: before[key] for key in counters}


METRIC = re.compile(r"\b((?:outreach|llm_budget|llm_deployment)_[a-z0-9_]+)")


def _rules() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DOCS / "prometheus" / "alerts.yml").read_text())
    return loaded


def _grafana_exprs() -> list[str]:
    dashboard = json.loads((DOCS / "grafana" / "outreach.json").read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_the_alert_rules_have_the_prometheus_rules_file_shape() -> None:
    rules = _rules()
    assert set(rules) == {"groups"}
    for group in rules["groups"]:
        assert set(group) <= {"name", "interval", "limit", "rules"}
        assert isinstance(group["name"], str)
        assert group["rules"], "a group without rules"
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}, rule
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
            assert isinstance(rule["expr"], str)
            assert rule["expr"].count("(") == rule["expr"].count(")")
            assert re.fullmatch(r"\d+[smhdwy]", rule.get("for", "0s"))
            for section in ("labels", "annotations"):
                assert all(isinstance(v, str) for v in rule.get(section, {}).values())


def test_every_metric_the_rules_and_dashboard_use_is_exposed(redis_client: redis.Redis) -> None:
    _, exposed = _scrape()  # an empty database: every family is still declared
    exprs = [r["expr"] for g in _rules()["groups"] for r in g["rules"]] + _grafana_exprs()
    used = {name for expr in exprs for name in METRIC.findall(expr)}
    assert len(used) >= 20
    assert used - exposed == set()


def test_every_call_the_provider_refused_is_counted_whether_its_job_waited_or_went_back(
    redis_client: redis.Redis,
) -> None:
    # given two calls the provider answered 429 (a worker waits a short one off: no move says so)
    budget = budget_from_settings()
    budget.report_429(retry_after_s=0)
    budget.report_429(retry_after_s=0)
    # when scraped, then the budget's count of them is a counter
    samples, _ = _scrape()
    assert samples[("llm_budget_provider_429s_total", ())] == 2
