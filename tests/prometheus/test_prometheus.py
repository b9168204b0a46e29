"""The shipped Prometheus rules and Grafana dashboard, held by promtool (scripts/ensure_promtool.sh
extracts it from Debian's `prometheus` package when it is missing): the rules load, every alert
has a case that fires it and one that does not (tests/prometheus/alerts_test.yml), and every
dashboard expression parses and shows the same figure whether one web replica or two are
scraped (each replica reports the same PostgreSQL-, Redis- and broker-backed figures)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.prometheus.conftest import ALERT_TESTS, RULES, promtool_run

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "outreach.json"


def test_the_alert_rules_load_and_their_unit_tests_pass(promtool: str) -> None:
    assert "SUCCESS" in promtool_run(promtool, "check", "rules", str(RULES))
    assert "SUCCESS" in promtool_run(promtool, "test", "rules", str(ALERT_TESTS))


def test_every_alert_has_a_case_that_fires_it_and_one_that_does_not() -> None:
    alerts = {
        r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r
    }
    cases = [
        case
        for test in yaml.safe_load(ALERT_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
    ]
    fired = {c["alertname"] for c in cases if c.get("exp_alerts")}
    silent = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert "OutreachTargetDown" in alerts
    assert "OutreachQueueUnconsumed" in alerts
    assert alerts - fired == set(), "alerts no test fires"
    assert alerts - silent == set(), "alerts no test keeps silent"


# Each series as one replica reports it: gauges constant, counters growing at a known rate per
# second (`0+60x40` at 1-minute steps is 1/s).
SERIES: dict[str, str] = {
    'outreach_dead_letters_open{class="policy"}': "2x40",
    'outreach_dead_letters_open{class="transient"}': "3x40",
    "outreach_dead_letter_oldest_open_age_seconds": "120x40",
    'outreach_ready{tier="intro"}': "4x40",
    'outreach_ready{tier="reply"}': "1x40",
    "outreach_llm_in_flight": "7x40",
    "outreach_llm_in_flight_target": "9x40",
    "outreach_sent_total": "0+60x40",
    'outreach_generated_total{tier="intro"}': "0+120x40",
    'outreach_dead_letters_total{class="policy"}': "0+6x40",
    "outreach_retries_total": "0+30x40",
    "outreach_provider_429s_total": "0+12x40",
    "llm_budget_provider_429s_total": "0+12x40",
    'outreach_completion_latency_seconds_bucket{tier="reply", le="60"}': "0+6x40",
    'outreach_completion_latency_seconds_bucket{tier="reply", le="300"}': "0+6x40",
    'outreach_completion_latency_seconds_bucket{tier="reply", le="+Inf"}': "0+6x40",
    'outreach_llm_call_duration_seconds_bucket{step="plan", le="10"}': "0+6x40",
    'outreach_llm_call_duration_seconds_bucket{step="plan", le="60"}': "0+6x40",
    'outreach_llm_call_duration_seconds_bucket{step="plan", le="+Inf"}': "0+6x40",
    'outreach_llm_call_duration_seconds_sum{step="plan"}': "0+30x40",
    'outreach_llm_call_duration_seconds_count{step="plan"}': "0+6x40",
    "outreach_llm_requests_total": "0+180x40",
    "llm_budget_requests_in_window": "50x40",
    "llm_budget_effective_rpm": "600x40",
    "llm_budget_limit_rpm": "1000x40",
    "outreach_llm_tokens_total": "0+6000x40",
    "llm_budget_effective_tpm": "100000x40",
    'outreach_queue_depth{state="queued", tier="intro"}': "10x40",
    'outreach_queue_depth{state="generating", tier="intro"}': "3x40",
    'outreach_oldest_ready_age_seconds{tier="intro"}': "300x40",
    'outreach_celery_queue_ready_messages{queue="reply"}': "3x40",
    'outreach_celery_queue_consumers{queue="reply"}': "0x40",
    'outreach_celery_workers{queue="reply"}': "0x40",
    'outreach_owner_sent_total{owner_id="7"}': "0+60x40",
    'outreach_owner_dispatched_total{owner_id="7"}': "0+120x40",
    'outreach_owner_dispatched_total{owner_id="8"}': "0+30x40",
    'outreach_replies_classified_total{organization_id="3", reply_class="question", by="model"}': "0+5x40",
    'outreach_replies_classified_total{organization_id="4", reply_class="question", by="rules"}': "0+1x40",
    'outreach_replies_classified_total{organization_id="3", reply_class="question", by="person"}': "0+2x40",
    'outreach_reply_drafts_decided_total{organization_id="3", reply_class="question", decision="approved"}': (
        "0+6x40"
    ),
    'outreach_reply_drafts_decided_total{organization_id="3", reply_class="question", decision="rejected"}': (
        "0+1x40"
    ),
    'outreach_reply_drafts_decided_total{organization_id="4", reply_class="question", decision="rejected"}': (
        "0+1x40"
    ),
}

# What each panel (by title and query) must show for SERIES, written out by hand: the truth of
# one copy of the figures, per minute where the panel says so.
J = 'job="outreach"'
EXPECTED: dict[tuple[str, str], list[tuple[str, float]]] = {
    ("Dead letters open", "A"): [("{}", 5)],
    ("Oldest open dead letter", "A"): [(f"{{{J}}}", 120)],
    ("Ready now", "A"): [("{}", 5)],
    ("LLM in flight / target", "A"): [(f"{{{J}}}", 7)],
    ("LLM in flight / target", "B"): [(f"{{{J}}}", 9)],
    ("Sent and generated per minute", "A"): [("{}", 60)],
    ("Sent and generated per minute", "B"): [('{tier="intro"}', 120)],
    ("Failures per minute", "A"): [('{class="policy"}', 6)],
    ("Failures per minute", "B"): [(f"{{{J}}}", 30)],
    ("Failures per minute", "C"): [(f"{{{J}}}", 12)],
    ("Completion latency per tier (due to done)", "A"): [('{tier="reply"}', 57)],
    ("Completion latency per tier (due to done)", "B"): [('{tier="reply"}', 30)],
    ("LLM call duration per step", "A"): [('{step="plan"}', 9.5)],
    ("LLM call duration per step", "B"): [('{step="plan"}', 5)],
    ("LLM budget: requests per minute", "A"): [(f"{{{J}}}", 180)],
    ("LLM budget: requests per minute", "B"): [(f"{{{J}}}", 50)],
    ("LLM budget: requests per minute", "C"): [(f"{{{J}}}", 600)],
    ("LLM budget: requests per minute", "D"): [(f"{{{J}}}", 1000)],
    ("LLM tokens per minute", "A"): [(f"{{{J}}}", 6000)],
    ("LLM tokens per minute", "B"): [(f"{{{J}}}", 100000)],
    ("Queue depth per tier", "A"): [('{tier="intro"}', 10)],
    ("Queue depth per tier", "B"): [(f'{{{J}, tier="intro"}}', 4), (f'{{{J}, tier="reply"}}', 1)],
    ("Oldest ready wait per tier", "A"): [(f'{{{J}, tier="intro"}}', 300)],
    ("Celery queues: ready messages, consumers, workers", "A"): [(f'{{{J}, queue="reply"}}', 3)],
    ("Celery queues: ready messages, consumers, workers", "B"): [(f'{{{J}, queue="reply"}}', 0)],
    ("Celery queues: ready messages, consumers, workers", "C"): [(f'{{{J}, queue="reply"}}', 0)],
    ("Sent and dispatched per owner per minute (top 10)", "A"): [('{owner_id="7"}', 60)],
    ("Sent and dispatched per owner per minute (top 10)", "B"): [
        ('{owner_id="7"}', 120),
        ('{owner_id="8"}', 30),
    ],
    # the 20 minutes since the counters began: (5 + 1) a minute, the person's corrections apart
    ("Replies received per class (last hour)", "A"): [('{reply_class="question"}', 120)],
    # both organizations' decisions: 6 approved, 1 + 1 rejected
    ("Reply drafts approved per class (24 h)", "A"): [('{reply_class="question"}', 0.75)],
}


def _targets() -> dict[tuple[str, str], str]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return {(p["title"], t["refId"]): t["expr"] for p in dashboard["panels"] for t in p["targets"]}


def _with_labels(series: str, labels: str) -> str:
    name, _, rest = series.partition("{")
    return f"{name}{{{labels}, {rest}" if rest else f"{name}{{{labels}}}"


@pytest.mark.parametrize("replicas", [1, 2])
def test_every_dashboard_figure_is_the_same_with_one_web_replica_or_two(
    promtool: str, tmp_path: Path, replicas: int
) -> None:
    # given each figure reported by `replicas` web replicas, as Prometheus stores their scrapes
    targets = _targets()
    assert set(targets) == set(EXPECTED), "a dashboard query without its expected figure here"
    input_series = [
        {"series": _with_labels(series, f'{J}, instance="web-{n}"'), "values": values}
        for series, values in SERIES.items()
        for n in range(1, replicas + 1)
    ]
    cases = [
        {
            "expr": targets[key],
            "eval_time": "20m",
            "exp_samples": [{"labels": labels, "value": value} for labels, value in EXPECTED[key]],
        }
        for key in sorted(targets)
    ]
    tests = {"tests": [{"interval": "1m", "input_series": input_series, "promql_expr_test": cases}]}
    path = tmp_path / "dashboard_test.yml"
    path.write_text(yaml.safe_dump({"rule_files": [], **tests}, sort_keys=False))
    # when promtool evaluates every dashboard query; then each shows one copy of the figure
    assert "SUCCESS" in promtool_run(promtool, "test", "rules", str(path))
