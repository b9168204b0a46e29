"""Prometheus exposition of the queue-health figures: a custom Collector built on the same
selectors as the dashboard and `queue_stats` (orchestrator.metrics.queue_health), so they agree.

Gauges describe "now" (and the day so far, for spend caps). Rates and windows are PromQL's:
`rate()`/`increase()` over the counters and histograms (`_total`, `_bucket`/`_sum`/`_count`)
from outreach.counters, counted in the transaction of each state change, in PostgreSQL, so they
never decrease (not on a restart, not when retention prunes history) and every process on
every host adds to the same totals. A scrape computes no window of activity: the dashboard's
window figures (queue_health's `activity`, the owners' sent and dispatched over 1 h and 24 h,
the replies per triage class received and decided) are not exposed; their counters are
(per owner: `outreach_owner_sent_total`, `outreach_owner_dispatched_total`; per organization
and class: `outreach_replies_classified_total`, `outreach_reply_drafts_decided_total`).

Scoped (a member's session, `organization_ids`): the figures of those organizations' own work,
and of the counters only the series labelled with one of their owners (`owner_id`) or with one
of them (`organization_id`); the platform's counters and histograms, and the broker, are left
out.

Cheap scrapes: the platform's exposition is rendered at most once per METRICS_CACHE_S and kept
in Redis (`metrics:exposition`), shared by every thread and process of every web replica, so
N replicas x M processes scraped every 15 s cost one computation per METRICS_CACHE_S. With Redis
away each scrape renders its own (and llm_budget_up says 0).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass
from datetime import datetime

import redis
from django.conf import settings
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from config.celery import app as celery_app
from config.queues import Queue
from config.redis_client import shared as shared_redis
from orchestrator.dispatch.inflight import STEPS
from orchestrator.failures.dead_letters import replay_success_rate
from orchestrator.metrics.broker import BrokerNow, broker_queues_now
from orchestrator.metrics.budget_use import BudgetNow, budget_now
from orchestrator.metrics.dead_letter_classes import FailureClass, dead_letter_classes, oldest_open_age_s
from orchestrator.metrics.deployments import DeploymentNow, deployments_now
from orchestrator.metrics.depth import (
    DEFERRED_REASON_CODES,
    Deferred,
    Depth,
    deferred_reason_code,
    deferred_work,
    queue_depth,
)
from orchestrator.metrics.in_flight import InFlightNow, in_flight_now
from orchestrator.metrics.replies import replies_awaiting
from orchestrator.metrics.spend import Spend, spend_today
from outreach import counters as c
from outreach.counters import Labels
from outreach.models import Owner


@dataclass(frozen=True)
class Scrape:
    """What one scrape reads: the figures of now, no window."""

    depth: Depth
    deferred: Deferred
    failures: list[FailureClass]
    oldest_open_dead_letter_age_s: float | None
    replay_success_rate: float | None
    budget: BudgetNow
    in_flight: InFlightNow
    deployments: list[DeploymentNow]
    spend: Spend
    replies_awaiting: dict[str, int]  # per triage class, now


def scrape_read(*, now: datetime, organization_ids: Collection[int] | None) -> Scrape:
    return Scrape(
        depth=queue_depth(now=now, organization_ids=organization_ids),
        deferred=deferred_work(organization_ids=organization_ids),
        failures=dead_letter_classes(organization_ids=organization_ids),
        oldest_open_dead_letter_age_s=oldest_open_age_s(now=now, organization_ids=organization_ids),
        replay_success_rate=replay_success_rate(),
        budget=budget_now(),
        in_flight=in_flight_now(),
        deployments=deployments_now(),
        spend=spend_today(now=now, organization_ids=organization_ids),
        replies_awaiting=replies_awaiting(organization_ids=organization_ids),
    )


def _gauge(name: str, doc: str, labels: list[str], values: dict[tuple[str, ...], float | None]) -> Metric:
    family = GaugeMetricFamily(name, doc, labels=labels)
    for key, value in values.items():
        if value is not None:  # no sample yet: leave the series out rather than report 0
            family.add_metric(list(key), value)
    return family


def _one(name: str, doc: str, value: float | None) -> Metric:
    return _gauge(name, doc, [], {(): value})


def _depth(h: Scrape) -> Iterator[Metric]:
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
    by_code: Counter[str] = Counter()
    for r in h.deferred.reasons:  # the text is for people (the dashboard); a label is a code
        by_code[deferred_reason_code(r.reason)] += r.rows
    yield _gauge(
        "outreach_deferred_rows",
        f"Queued rows waiting, per reason code ({', '.join(DEFERRED_REASON_CODES)}).",
        ["reason"],
        {(code,): rows for code, rows in by_code.items()},
    )


def _failures(h: Scrape) -> Iterator[Metric]:
    yield _gauge(
        "outreach_dead_letters_open",
        "Open or escalated dead letters per failure class.",
        ["class"],
        {(f.failure_class,): f.open for f in h.failures},
    )
    yield _one(
        "outreach_dead_letter_oldest_open_age_seconds",
        "How long the oldest open or escalated dead letter has waited for a decision.",
        h.oldest_open_dead_letter_age_s,
    )
    yield _one(
        "outreach_replay_success_ratio", "Replayed dead letters that then succeeded.", h.replay_success_rate
    )


def _budget(h: Scrape) -> Iterator[Metric]:
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
    answered = CounterMetricFamily(
        "llm_budget_provider_429s",
        "Calls the provider answered 429, whether the job waited or went back to the queue.",
    )
    if b.answered_429 is not None:
        answered.add_metric([], b.answered_429)
    yield answered


def _in_flight(h: Scrape) -> Iterator[Metric]:
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


COUNTER_DOCS = {
    c.SENT: "Emails sent (moves to SENT).",
    c.GENERATED: "Drafts written (GENERATING -> awaiting approval or to send), per tier.",
    c.DEAD_LETTERS: "Outreach dead-lettered (moves to DEAD), per failure class.",
    c.RETRIES: "Transient failures sent back to the queue with backoff.",
    c.PROVIDER_429S: "Moves caused by a provider 429 (rate limited).",
    c.LLM_REQUESTS: "LLM provider calls of the drafts written.",
    c.LLM_TOKENS: "LLM tokens of the drafts written.",
    c.OWNER_SENT: "Emails sent (moves to SENT), per owner.",
    c.OWNER_DISPATCHED: "Outreach claimed by the dispatcher (QUEUED or APPROVED -> DISPATCHED), per owner.",
    c.REPLIES_CLASSIFIED: (
        "Replies given a triage class, per organization, class and who decided (rules, model, "
        "person: a reclassification, counted under the new class)."
    ),
    c.REPLY_DRAFTS_DECIDED: "Reply drafts approved or rejected, per organization and class.",
}
# Series of one organization's work, labelled with an owner_id or an organization_id: a
# member's scrape shows those of its organizations, and nothing else of the counters.
SCOPED_COUNTERS = (c.OWNER_SENT, c.OWNER_DISPATCHED, c.REPLIES_CLASSIFIED, c.REPLY_DRAFTS_DECIDED)


def _counters(stored: dict[str, dict[Labels, int]], *, names: Collection[str]) -> Iterator[Metric]:
    for name in names:
        series = stored.get(name, {})
        label_names = sorted({k for labels in series for k, _ in labels})
        family = CounterMetricFamily(name, COUNTER_DOCS[name], labels=label_names)
        if not label_names and name not in SCOPED_COUNTERS:  # a plain counter exists from the start, at 0
            family.add_metric([], series.get((), 0))
        for labels, value in sorted(series.items()):
            if labels:
                family.add_metric([v for _, v in sorted(labels)], value)
        yield family


def _in_scope(
    stored: dict[str, dict[Labels, int]], *, organization_ids: Collection[int]
) -> dict[str, dict[Labels, int]]:
    """The scoped counters' series of those organizations only: labelled with one of their
    owners (owner_id; the owner's organization now) or with one of them (organization_id)."""
    owners = Owner.objects.filter(organization_id__in=organization_ids).values_list("id", flat=True)
    ours = {"owner_id": {str(i) for i in owners}, "organization_id": {str(i) for i in organization_ids}}
    return {
        name: {
            labels: n
            for labels, n in stored.get(name, {}).items()
            if any(value in ours.get(key, ()) for key, value in labels)
        }
        for name in SCOPED_COUNTERS
    }


def _histograms(stored: dict[str, dict[Labels, int]]) -> Iterator[Metric]:
    for name, label, values, doc in (
        (
            c.COMPLETION_LATENCY,
            "tier",
            c.TIER_NAMES,
            "From due to done (sent, or a draft for review), per tier.",
        ),
        (c.LLM_CALL_DURATION, "step", STEPS, "LLM provider call duration, per generation step."),
    ):
        family = HistogramMetricFamily(name, doc, labels=[label])
        for value, (buckets, total, _count) in c.histogram_series(
            stored, histogram=name, label=label, values=values
        ).items():
            family.add_metric([value], [(le, float(n)) for le, n in buckets], total)
        yield family


def _deployments(h: Scrape) -> Iterator[Metric]:
    """Per LLM deployment (label name#index): limits, last-window use, headroom, breaker."""
    for name, doc, field in (
        ("limit_rpm", "Configured requests/min of the deployment.", "limit_rpm"),
        ("limit_tpm", "Configured tokens/min of the deployment.", "limit_tpm"),
        ("requests_in_window", "Its calls in the last 60 s.", "used_requests"),
        ("tokens_in_window", "Its tokens in the last 60 s.", "used_tokens"),
        ("headroom_requests", "Requests the dispatcher may reserve there now.", "headroom_requests"),
        ("headroom_tokens", "Tokens the dispatcher may reserve there now.", "headroom_tokens"),
    ):
        yield _gauge(
            f"llm_deployment_{name}",
            doc,
            ["deployment", "model"],
            {(d.label, d.model): getattr(d, field) for d in h.deployments},
        )
    yield _gauge(
        "llm_deployment_breaker_open",
        "1 while the deployment's breaker is not closed (misconfigured: 401/403/404), else 0.",
        ["deployment", "model"],
        {(d.label, d.model): float(d.breaker not in ("closed", "unknown")) for d in h.deployments},
    )


def _spend(h: Scrape) -> Iterator[Metric]:
    yield _gauge(
        "outreach_llm_spend_today_dollars",
        "LLM spend of the drafts written today (UTC day, LLM_PRICES), per owner.",
        ["owner_id", "owner"],
        {(str(o.id), o.name): o.dollars for o in h.spend.owners},
    )
    yield _gauge(
        "outreach_organization_llm_spend_today_dollars",
        "LLM spend of the drafts written today (UTC day, LLM_PRICES), per organization.",
        ["organization_id", "organization"],
        {(str(o.id), o.name): o.dollars for o in h.spend.organizations},
    )
    yield _gauge(
        "outreach_organization_daily_spend_cap_dollars",
        "An organization's daily LLM spend cap (Organization.daily_spend_cap), where set.",
        ["organization_id", "organization"],
        {(str(o.id), o.name): o.cap for o in h.spend.organizations},
    )


def _broker(b: BrokerNow) -> Iterator[Metric]:
    yield _one("outreach_celery_broker_up", "1 when the Celery broker answered the queue check.", int(b.up))
    for name, doc, field in (
        ("ready_messages", "Messages waiting on the Celery queue for a consumer.", "ready"),
        (
            "consumers",
            "Consumers of the queue: the broker's count on RabbitMQ; on Redis, the workers heard from.",
            "consumers",
        ),
    ):
        yield _gauge(
            f"outreach_celery_queue_{name}", doc, ["queue"], {(q.queue,): getattr(q, field) for q in b.queues}
        )
    yield _gauge(
        "outreach_celery_workers",
        "Workers of each queue (worker kind of the Procfile) heard from in the last 30 s.",
        ["queue"],
        {(q.queue,): q.workers for q in b.queues},
    )


def _replies(h: Scrape) -> Iterator[Metric]:
    """Per triage class; the label is the class code (a fixed set), never text."""
    yield _gauge(
        "outreach_replies_awaiting_approval",
        "Reply drafts awaiting approval now, per class.",
        ["reply_class"],
        {(code,): n for code, n in h.replies_awaiting.items()},
    )


SECTIONS: tuple[Callable[[Scrape], Iterator[Metric]], ...] = (
    _depth,
    _failures,
    _budget,
    _in_flight,
    _deployments,
    _spend,
    _replies,
)


class QueueHealthCollector(Collector):
    """Every figure (None: the platform's scraper), or those of some organizations' own work:
    their queue, dead letters, pauses, spend and replies awaiting, as their dashboard shows
    them, and the counters of their owners and of them (SCOPED_COUNTERS, their series only).
    The pipeline's other counters and histograms are platform totals, so a scoped collector
    leaves them out."""

    def __init__(self, *, organization_ids: Collection[int] | None = None) -> None:
        self.organization_ids = organization_ids

    def collect(self) -> Iterator[Metric]:
        scrape = scrape_read(now=timezone.now(), organization_ids=self.organization_ids)
        for section in SECTIONS:
            yield from section(scrape)
        stored = c.counters_read()
        if self.organization_ids is not None:
            yield from _counters(
                _in_scope(stored, organization_ids=self.organization_ids), names=SCOPED_COUNTERS
            )
        else:  # the platform's plumbing too: no organization's own
            yield from _counters(stored, names=COUNTER_DOCS)
            yield from _histograms(stored)
            yield from _broker(
                broker_queues_now(app=celery_app, queues=[q.value for q in Queue], presence=shared_redis())
            )


def metrics_registry(*, organization_ids: Collection[int] | None = None) -> CollectorRegistry:
    """A registry of our collector only (no process metrics: several web processes would clash)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueHealthCollector(organization_ids=organization_ids))
    return registry


CACHE_KEY = "metrics:exposition"


def platform_exposition(*, registry: CollectorRegistry) -> bytes:
    """The platform scrape's text, from the shared cache when younger than METRICS_CACHE_S
    (0: no cache). Two processes missing at once both render (no lock): at most one render
    per process per METRICS_CACHE_S, which is the cost bound that matters."""
    ttl_ms = int(settings.METRICS_CACHE_S * 1000)
    if ttl_ms <= 0:
        return generate_latest(registry)
    client = shared_redis()
    try:
        cached = client.get(CACHE_KEY)
    except redis.RedisError:
        return generate_latest(registry)
    if isinstance(cached, bytes):
        return cached
    body = generate_latest(registry)
    with contextlib.suppress(redis.RedisError):
        client.set(CACHE_KEY, body, px=ttl_ms)
    return body
