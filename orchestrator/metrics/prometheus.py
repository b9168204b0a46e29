"""Prometheus exposition of the queue-health figures: a custom Collector that computes
`queue_health()` once per scrape, so /metrics, the dashboard and `queue_stats` agree.

Gauges describe "now" or the recent window (its length in outreach_window_seconds); only
all-time totals that never decrease are counters (sent, dead letters).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from orchestrator.metrics.health import QueueHealth, queue_health


def _gauge(name: str, doc: str, labels: list[str], values: dict[tuple[str, ...], float | None]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for key, value in values.items():
        if value is not None:  # no sample yet: leave the series out rather than report 0
            family.add_metric(list(key), value)
    return family


def _one(name: str, doc: str, value: float | None) -> Metric:
    return _gauge(name, doc, [], {(): value})


def _depth(h: QueueHealth) -> Iterator[Metric]:
    d = h.depth
    yield _gauge(
        "outreach_state_rows",
        "Outreach rows per state (all states).",
        ["state"],
        {(s,): n for s, n in d.states.items()},
    )
    yield _gauge(
        "outreach_queue_depth",
        "Live outreach rows (the queue) per state and tier.",
        ["state", "tier"],
        {(s, t): n for t, states in d.tiers.items() for s, n in states.items()},
    )
    yield _gauge(
        "outreach_ready",
        "Queued rows ready to dispatch now, per tier.",
        ["tier"],
        {(t,): n for t, n in d.ready_by_tier.items()},
    )
    yield _gauge(
        "outreach_oldest_ready_age_seconds",
        "How long the oldest ready row has waited, per tier.",
        ["tier"],
        {(t,): age for t, age in d.oldest_ready_age_s_by_tier.items()},
    )
    yield _gauge(
        "outreach_deferred_rows",
        "Queued rows labelled with why they wait (blocked_reason).",
        ["reason"],
        {(r.reason,): r.rows for r in h.deferred.reasons},
    )


def _window(h: QueueHealth) -> Iterator[Metric]:
    a = h.activity
    yield _one(
        "outreach_window_seconds",
        "Length of the recent window the outreach_window_* figures cover.",
        h.window_s,
    )
    for field in (
        "completed",
        "sent",
        "dead",
        "retries",
        "provider_429s",
        "generated",
        "llm_requests",
        "tokens",
        "approved",
        "rejected",
    ):
        yield _one(
            f"outreach_window_{field}", f"{field.replace('_', ' ')} in the recent window.", getattr(a, field)
        )
    yield _gauge(
        "outreach_latency_seconds",
        "Due-to-completed latency in the window, per tier.",
        ["tier", "quantile"],
        {(t, q): v for t, qs in a.latency.items() for q, v in (("0.5", qs.p50_s), ("0.95", qs.p95_s))},
    )
    yield _gauge(
        "outreach_time_to_approval_seconds",
        "Awaiting approval to approved, in the window.",
        ["quantile"],
        {("0.5",): a.time_to_approval.p50_s, ("0.95",): a.time_to_approval.p95_s},
    )
    yield _gauge(
        "outreach_success_ratio",
        "Completed / (completed + dead) in the window, per kind.",
        ["kind"],
        {(k,): o.rate for k, o in a.success_by_kind.items()},
    )
    yield _one("outreach_retry_ratio", "Transient retries per completed outreach.", h.retry_rate)
    yield _one("outreach_dead_letter_ratio", "Dead / (completed + dead) in the window.", h.dead_letter_rate)
    yield _one("outreach_approval_ratio", "Approved / (approved + rejected) in the window.", h.approval_rate)
    yield _one("outreach_tokens_per_completed", "LLM tokens per generated draft.", h.tokens_per_completed)
    yield _one(
        "outreach_cost_per_completed",
        "LLM cost per generated draft (LLM_COST_PER_1K_TOKENS).",
        h.cost_per_completed,
    )


def _owners(h: QueueHealth) -> Iterator[Metric]:
    for field, doc in (("sent", "Emails sent"), ("dispatched", "Outreach dispatched")):
        yield _gauge(
            f"outreach_owner_{field}",
            f"{doc} per owner over the last hour/day.",
            ["owner_id", "owner", "period"],
            {
                (str(o.owner_id), o.name, period): getattr(o, f"{field}_{period}")
                for o in h.owners
                for period in ("1h", "24h")
            },
        )


def _failures(h: QueueHealth) -> Iterator[Metric]:
    sent = CounterMetricFamily("outreach_sent", "Outreach rows in state sent (all time).")
    sent.add_metric([], h.depth.states["sent"])
    yield sent
    letters = CounterMetricFamily(
        "outreach_dead_letters", "Dead letters per failure class (all time).", labels=["class"]
    )
    for f in h.failures:
        letters.add_metric([f.failure_class], f.total)
    yield letters
    yield _gauge(
        "outreach_dead_letters_open",
        "Open or escalated dead letters per failure class.",
        ["class"],
        {(f.failure_class,): f.open for f in h.failures},
    )
    yield _one(
        "outreach_replay_success_ratio", "Replayed dead letters that then succeeded.", h.replay_success_rate
    )


def _budget(h: QueueHealth) -> Iterator[Metric]:
    b = h.budget
    yield _one(
        "llm_budget_up", "1 when the budget's Redis answered the snapshot.", 1 if b.redis == "ok" else 0
    )
    for name, doc, value in (
        ("limit_rpm", "Configured requests/min (LLM_RPM).", b.limit_rpm),
        ("limit_tpm", "Configured tokens/min (LLM_TPM).", b.limit_tpm),
        ("effective_rpm", "Window limit after adaptation (429s, provider headers).", b.effective_rpm),
        ("effective_tpm", "Token window limit after adaptation.", b.effective_tpm),
        ("rate_rpm", "Dispatch refill rate, requests/min.", b.rate_rpm),
        ("rate_tpm", "Dispatch refill rate, tokens/min.", b.rate_tpm),
        ("requests_in_window", "Provider calls in the last 60 s window.", b.requests_in_window),
        ("tokens_in_window", "Tokens in the last 60 s window.", b.tokens_in_window),
        ("in_flight", "Reservations held by running jobs.", b.in_flight),
        ("last_429_age_seconds", "Seconds since the provider last answered 429.", b.last_429_age_s),
    ):
        yield _one(f"llm_budget_{name}", doc, value)


def _in_flight(h: QueueHealth) -> Iterator[Metric]:
    f = h.in_flight
    yield _one("outreach_llm_in_flight", "Outreach holding an LLM reservation now.", f.in_flight)
    yield _one(
        "outreach_llm_in_flight_target",
        "The dispatcher's in-flight target: budget rate x job latency x (1 + headroom), capped.",
        f.target,
    )
    yield _one("outreach_llm_in_flight_cap", "DISPATCH_MAX_IN_FLIGHT, the target's upper cap.", f.cap)
    yield _one("outreach_llm_allowed_rate", "Outreach per second the LLM budget admits now.", f.rate_per_s)
    yield _one(
        "outreach_llm_job_latency_seconds",
        "Job latency the target is sized on: each step's p95 plus one dispatch interval.",
        f.job_latency_s,
    )
    yield _gauge(
        "outreach_llm_call_latency_seconds",
        "Provider call duration over each step's last calls (plan, context, message).",
        ["step", "quantile"],
        {(step, q): v for step, qs in f.latency.items() for q, v in (("0.5", qs.p50_s), ("0.95", qs.p95_s))},
    )


SECTIONS: tuple[Callable[[QueueHealth], Iterator[Metric]], ...] = (
    _depth,
    _window,
    _owners,
    _failures,
    _budget,
    _in_flight,
)


class QueueHealthCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        health = queue_health()
        for section in SECTIONS:
            yield from section(health)


def metrics_registry() -> CollectorRegistry:
    """A registry of our collector only (no process metrics: several web processes would clash)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueHealthCollector())
    return registry
