"""The shared LLM budget over time: one sample a minute (written by the dispatcher) and the live view.

`budget_sample_record()` is safe to call every dispatch cycle from any number of processes:
the sample's `at` is the minute and unique, so the first caller of a minute records it and
everyone else finds it there (one indexed lookup) or loses the INSERT race harmlessly.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from orchestrator.budget import PROVIDER, Budget, get_budget
from orchestrator.metrics.activity import window_events
from orchestrator.models import BudgetSample
from outreach.models import ErrorClass


@dataclass(frozen=True)
class BudgetNow:
    """The provider scope as the budget sees it this moment (None fields: Redis unreachable)."""

    redis: str
    limit_rpm: int
    limit_tpm: int
    effective_rpm: int | None = None
    effective_tpm: int | None = None
    rate_rpm: int | None = None
    rate_tpm: int | None = None
    requests_in_window: int | None = None
    tokens_in_window: int | None = None
    in_flight: int | None = None
    last_429_age_s: float | None = None
    answered_429: int | None = None  # calls the provider refused since the budget's Redis began


@dataclass(frozen=True)
class BudgetPoint:
    at: datetime
    requests: int
    tokens: int
    limit_rpm: int
    limit_tpm: int
    effective_rpm: int
    effective_tpm: int
    rate_rpm: int
    rate_tpm: int
    provider_429s: int


def budget_sample_record(*, budget: Budget | None = None, now: datetime | None = None) -> BudgetSample | None:
    """Record this minute's budget use once cluster-wide; None when already recorded (or when
    Redis is unreachable: there is nothing true to record). Also drops samples past retention."""
    now = now or timezone.now()
    minute = now.replace(second=0, microsecond=0)
    if BudgetSample.objects.filter(at=minute).exists():  # the unique index: the cheap common case
        return None
    snap = (budget or get_budget()).snapshot()
    if snap.get("redis") != "ok":
        return None
    fields = _sample_fields(snap=snap, provider_429s=_recent_429s(now=now))
    sample, created = BudgetSample.objects.get_or_create(at=minute, defaults=fields)
    if not created:
        return None
    retention = timedelta(days=int(getattr(settings, "BUDGET_SAMPLE_RETENTION_DAYS", 7)))
    BudgetSample.objects.filter(at__lt=minute - retention).delete()
    return sample


def _recent_429s(*, now: datetime) -> int:
    return window_events(since=now - timedelta(minutes=1)).filter(error_class=ErrorClass.RATE_LIMITED).count()


def _sample_fields(*, snap: dict[str, Any], provider_429s: int) -> dict[str, int]:
    scope, configured = snap["scopes"][PROVIDER], snap["configured"][PROVIDER]
    # Lua's JSON encoder may write large integers in float notation: int() them back.
    return {
        "requests": int(scope["calls_in_window"]),
        "tokens": int(scope["tokens_in_window"]),
        "limit_rpm": int(configured["rpm"]),
        "limit_tpm": int(configured["tpm"]),
        "effective_rpm": int(scope["limit_rpm"]),
        "effective_tpm": int(scope["limit_tpm"]),
        "rate_rpm": int(scope["requests_per_min"]),
        "rate_tpm": int(scope["tokens_per_min"]),
        "in_flight": int(snap.get("in_flight", 0)),
        "provider_429s": provider_429s,
    }


def budget_now(*, budget: Budget | None = None) -> BudgetNow:
    snap = (budget or get_budget()).snapshot()
    configured = snap["configured"][PROVIDER]
    if snap.get("redis") != "ok":
        return BudgetNow(redis="unavailable", limit_rpm=configured["rpm"], limit_tpm=configured["tpm"])
    fields = _sample_fields(snap=snap, provider_429s=0)
    last_429_ms = snap["scopes"][PROVIDER].get("last_429_ms")
    return BudgetNow(
        redis="ok",
        limit_rpm=fields["limit_rpm"],
        limit_tpm=fields["limit_tpm"],
        effective_rpm=fields["effective_rpm"],
        effective_tpm=fields["effective_tpm"],
        rate_rpm=fields["rate_rpm"],
        rate_tpm=fields["rate_tpm"],
        requests_in_window=fields["requests"],
        tokens_in_window=fields["tokens"],
        in_flight=fields["in_flight"],
        last_429_age_s=(snap["now_ms"] - last_429_ms) / 1000 if last_429_ms else None,
        answered_429=int(snap["scopes"][PROVIDER].get("answered_429", 0)),
    )


def budget_last_hour(*, now: datetime) -> list[BudgetPoint]:
    """At most 60 rows: a range scan of the unique `at` index."""
    rows = BudgetSample.objects.filter(at__gt=now - timedelta(hours=1), at__lte=now).order_by("at")
    return [
        BudgetPoint(
            at=s.at,
            requests=s.requests,
            tokens=s.tokens,
            limit_rpm=s.limit_rpm,
            limit_tpm=s.limit_tpm,
            effective_rpm=s.effective_rpm,
            effective_tpm=s.effective_tpm,
            rate_rpm=s.rate_rpm,
            rate_tpm=s.rate_tpm,
            provider_429s=s.provider_429s,
        )
        for s in rows
    ]
