"""The queue's alert conditions, checked by the beat task `orchestrator.alerts_check` every
ALERT_CHECK_INTERVAL_S: `alerts_due()` decides on plain facts (pure); `alerts_check()` loads the
facts and raises what is due through orchestrator.notify (once per condition per interval)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Min, Sum
from django.utils import timezone

from config.celery import app as celery_app
from config.queues import Queue
from config.redis_client import shared as shared_redis
from config.worker_presence import presence_last_heard
from orchestrator.failures.dead_letters import ACTIONABLE
from orchestrator.figures import ratio
from orchestrator.metrics.activity import window_events
from orchestrator.metrics.broker import broker_queues_now
from orchestrator.metrics.budget_use import budget_now
from orchestrator.metrics.dead_letter_classes import oldest_open_age_s
from orchestrator.models import BudgetSample, DeadLetter
from orchestrator.notify import alert_raise
from outreach.models import ErrorClass, Outreach, State

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AlertFacts:
    dead_letters_open: int
    oldest_dead_letter_age_s: float | None
    provider_429s: int  # rate-limited moves in the last check window
    last_429_age_s: float | None  # the budget's memory of the provider's last 429
    ready_waiting_s: float | None  # how long the oldest ready, undeferred queued row has waited
    budget_used: float | None  # requests / effective limit over the idle window (None: no samples)
    # Per Celery queue: (ready messages, consumers) from the broker; empty if it did not answer.
    queues: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Per queue of the recipe: seconds since one of its workers last said it runs (None: never,
    # or the last one stopped).
    workers_unheard_s: dict[str, float | None] = field(default_factory=dict)


@dataclass(frozen=True)
class AlertRules:
    dead_letters_open: int
    dead_letter_age_s: float
    window_s: float  # the recent window for 429s, and the idle window
    idle_below: float  # a share of the limit, 0..1
    worker_absent_s: float = 60.0  # a worker kind unheard of this long is absent


@dataclass(frozen=True)
class Alert:
    condition: str
    text: str


def alerts_due(facts: AlertFacts, rules: AlertRules) -> list[Alert]:
    """The conditions that hold now, each with the text an operator reads."""
    due = []
    if facts.dead_letters_open > rules.dead_letters_open:
        due.append(
            Alert(
                "dead-letters-open",
                f"{facts.dead_letters_open} dead letters are open (alert above {rules.dead_letters_open}): "
                "replay or cancel them in the admin's dead letters.",
            )
        )
    age = facts.oldest_dead_letter_age_s
    if age is not None and age > rules.dead_letter_age_s:
        due.append(
            Alert(
                "dead-letter-age",
                f"The oldest open dead letter has waited {age / 3600:.1f} h "
                f"(alert past {rules.dead_letter_age_s / 3600:g} h) for a decision.",
            )
        )
    recent_429 = facts.last_429_age_s is not None and facts.last_429_age_s <= rules.window_s
    if facts.provider_429s or recent_429:
        due.append(
            Alert(
                "provider-429",
                f"The LLM provider answered 429 (rate limited): {facts.provider_429s} jobs sent back in the "
                f"last {rules.window_s / 60:g} min. Check the key's quota and other users of the key.",
            )
        )
    idle = facts.budget_used is not None and facts.budget_used < rules.idle_below
    if idle and facts.ready_waiting_s is not None and facts.ready_waiting_s >= rules.window_s:
        due.append(
            Alert(
                "budget-idle",
                f"Work has been ready for {facts.ready_waiting_s / 60:.0f} min while the LLM budget used "
                f"{facts.budget_used:.0%} of its limit (alert below {rules.idle_below:.0%}): "
                "is the dispatcher or the generation worker stopped?",
            )
        )
    for queue, (ready, consumers) in facts.queues.items():
        if ready > 0 and consumers == 0:
            due.append(
                Alert(
                    f"queue-unconsumed-{queue}",
                    f"The {queue} queue holds {ready} messages and no worker consumes it: "
                    f"start the {queue} worker of the Procfile.",
                )
            )
    for queue, unheard in facts.workers_unheard_s.items():
        if unheard is None or unheard > rules.worker_absent_s:
            since = "never" if unheard is None else f"for {unheard / 60:.0f} min"
            due.append(
                Alert(
                    f"worker-absent-{queue}",
                    f"No {queue} worker has reported ({since}): its queue waits until one runs.",
                )
            )
    return due


def alert_rules() -> AlertRules:
    return AlertRules(
        dead_letters_open=settings.ALERT_DEAD_LETTERS_OPEN,
        dead_letter_age_s=settings.ALERT_DEAD_LETTER_AGE_S,
        window_s=settings.ALERT_IDLE_MINUTES * 60,
        idle_below=settings.ALERT_IDLE_BUDGET_PERCENT / 100,
    )


def alert_facts(*, now: datetime, window_s: float) -> AlertFacts:
    since = now - timedelta(seconds=window_s)
    samples = BudgetSample.objects.filter(at__gte=since).aggregate(
        requests=Sum("requests"), limit=Sum("effective_rpm")
    )
    ready = Outreach.objects.filter(state=State.QUEUED, not_before__lte=now, blocked_reason="")
    oldest_ready = ready.aggregate(at=Min("not_before"))["at"]
    return AlertFacts(
        dead_letters_open=DeadLetter.objects.filter(status__in=ACTIONABLE).count(),
        oldest_dead_letter_age_s=oldest_open_age_s(now=now),
        provider_429s=window_events(since=since).filter(error_class=ErrorClass.RATE_LIMITED).count(),
        last_429_age_s=budget_now().last_429_age_s,
        ready_waiting_s=None if oldest_ready is None else (now - oldest_ready).total_seconds(),
        budget_used=ratio(samples["requests"] or 0, samples["limit"] or 0),
        **_queue_facts(now=now),
    )


def _queue_facts(*, now: datetime) -> dict[str, Any]:
    """The broker's queues and the workers' presence (Redis); a store that does not answer
    gives no facts (its own alerts, and Prometheus' OutreachBrokerDown, cover it)."""
    queues = [q.value for q in Queue]
    broker = broker_queues_now(app=celery_app, queues=queues, presence=shared_redis())
    try:
        heard = presence_last_heard(client=shared_redis(), queues=queues)
    except Exception as exc:
        log.warning("worker presence unreadable: %s", exc)
        return {"queues": {q.queue: (q.ready, q.consumers) for q in broker.queues}}
    return {
        "queues": {q.queue: (q.ready, q.consumers) for q in broker.queues},
        "workers_unheard_s": {q: None if t is None else now.timestamp() - t for q, t in heard.items()},
    }


def alerts_check(*, now: datetime | None = None) -> list[str]:
    """Raise every alert due now; return the conditions notified (deduplicated ones left out)."""
    rules = alert_rules()
    facts = alert_facts(now=now or timezone.now(), window_s=rules.window_s)
    return [a.condition for a in alerts_due(facts, rules) if alert_raise(condition=a.condition, text=a.text)]
