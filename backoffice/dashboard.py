"""What the queue-health page shows, ready for the template: charts and display rows.

Kept out of the view (views stay thin) and out of the selectors (they return numbers, not text).

Every figure that counts rows links to the admin list of those rows, filtered with filters the
list accepts (its list_filter fields and plain lookups on its own fields), so the list shows
what the figure counted: the lists are scoped to the user's organizations as the figures are.
Window figures (counted from the history) and the budget have no list behind them.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from django.urls import reverse
from django.utils.safestring import SafeString

from orchestrator.failures.dead_letters import ACTIONABLE
from orchestrator.metrics.charts import budget_chart, latency_chart, owner_share_chart
from orchestrator.metrics.depth import LIVE, TIER_NAMES
from orchestrator.metrics.queue_health import QueueHealth
from outreach.models import Outreach, State
from outreach.transitions import IN_FLIGHT

DASH = "\u2014"  # a figure with no data yet (no division by zero, no fake 0)
TIER_VALUES = {name: value for value, name in TIER_NAMES.items()}
OUTREACH_LIST = "admin:outreach_outreach_changelist"
DEAD_LETTER_LIST = "admin:orchestrator_deadletter_changelist"


def changelist(name: str, **filters: str | int) -> str:
    """An admin list's URL with its filters (Django's own querystring lookups)."""
    url = reverse(name)
    return f"{url}?{urlencode(filters)}" if filters else url


def outreach_list(
    *, state: str | tuple[str, ...], tier: str | None = None, ready_at: datetime | None = None
) -> str:
    """Outreach in `state` (several: state__in), of a tier (its name), due by `ready_at`."""
    filters: dict[str, str | int] = (
        {"state__exact": state} if isinstance(state, str) else {"state__in": ",".join(state)}
    )
    if tier is not None:
        filters["tier__exact"] = TIER_VALUES[tier]
    if ready_at is not None:
        filters["not_before__lte"] = ready_at.isoformat()
    return changelist(OUTREACH_LIST, **filters)


def dead_letter_list(*, failure_class: str | None = None, open_only: bool = True) -> str:
    filters: dict[str, str | int] = {"status__in": ",".join(ACTIONABLE)} if open_only else {}
    if failure_class is not None:
        filters["failure_class__exact"] = failure_class
    return changelist(DEAD_LETTER_LIST, **filters)


def duration(seconds: float | None) -> str:
    """A wait as a person reads it: 45 s, 12.5 min, 3.2 h, 2.1 d; an em dash when unknown."""
    if seconds is None:
        return DASH
    for limit, divisor, unit in ((90, 1, "s"), (5_400, 60, "min"), (129_600, 3_600, "h")):
        if seconds < limit:
            return f"{seconds / divisor:.0f} {unit}" if unit == "s" else f"{seconds / divisor:.1f} {unit}"
    return f"{seconds / 86_400:.1f} d"


def seconds(value: float | None) -> str:
    """A provider call's duration: 0.35 s, 3.1 s, 12 s (duration() rounds below 90 s to whole seconds)."""
    if value is None:
        return DASH
    for below, places in ((1, 2), (10, 1)):  # two significant digits, whole seconds from 10 s
        if value < below:
            return f"{value:.{places}f} s"
    return f"{value:.0f} s"


def percent(value: float | None) -> str:
    return DASH if value is None else f"{value:.1%}"


def number(value: float | None, *, places: int = 0) -> str:
    return DASH if value is None else f"{value:.{places}f}"


def dollars(value: float | None) -> str:
    return DASH if value is None else f"${value:,.2f}"


def dashboard_context(*, health: QueueHealth) -> dict[str, Any]:
    return {"health": health, "charts": _charts(health), "summary": _summary(health), **_tables(health)}


def _charts(h: QueueHealth) -> dict[str, SafeString]:
    points, now = h.budget_last_hour, h.generated_at
    return {
        "budget_requests": budget_chart(points=points, now=now),
        "budget_tokens": budget_chart(points=points, now=now, tokens=True),
        "owners": owner_share_chart(owners=h.owners),
        "latency": latency_chart(latency=h.activity.latency),
    }


def _summary(h: QueueHealth) -> list[tuple[str, str, int | str, str]]:
    """The cards at the top: (id, name, value, the list behind it or "")."""
    d, ready = h.depth, outreach_list(state=State.QUEUED, ready_at=h.generated_at)
    return [
        ("ready", "Ready now", sum(d.ready_by_tier.values()), ready),
        ("oldest-ready", "Oldest ready waits", duration(d.oldest_ready_age_s), ready),
        (
            "awaiting",
            "Awaiting approval",
            d.states[State.AWAITING_APPROVAL],
            outreach_list(state=State.AWAITING_APPROVAL),
        ),
        ("in-flight", "In flight", sum(d.states[s] for s in IN_FLIGHT), outreach_list(state=IN_FLIGHT)),
        ("llm-in-flight", "LLM in flight / target", f"{h.in_flight.in_flight} / {h.in_flight.target}", ""),
        ("sent", "Sent (all time)", d.states[State.SENT], outreach_list(state=State.SENT)),
        ("dead-open", "Dead letters open", sum(f.open for f in h.failures), dead_letter_list()),
        (
            "dead-oldest",
            "Oldest open dead letter",
            duration(h.oldest_open_dead_letter_age_s),
            dead_letter_list(),
        ),
        ("provider-429s", "Provider 429s (window)", h.activity.provider_429s, ""),
        ("retry-rate", "Retry rate (window)", percent(h.retry_rate), ""),
    ]


def _tables(h: QueueHealth) -> dict[str, Any]:
    d, a, tiers = h.depth, h.activity, list(h.depth.tiers)
    return {
        "tiers": tiers,
        "depth_rows": [
            (
                s.value,
                s.label,
                [(t, d.tiers[t][s.value], outreach_list(state=s.value, tier=t)) for t in tiers],
                (d.states[s.value], outreach_list(state=s.value)),
            )
            for s in LIVE
        ],
        "ready_row": [
            (t, d.ready_by_tier[t], outreach_list(state=State.QUEUED, tier=t, ready_at=h.generated_at))
            for t in tiers
        ],
        "oldest_row": [duration(d.oldest_ready_age_s_by_tier[t]) for t in tiers],
        "oldest_ready": duration(d.oldest_ready_age_s),
        "awaiting": d.states[State.AWAITING_APPROVAL],
        "all_states": [(s.value, s.label, d.states[s.value], outreach_list(state=s.value)) for s in State],
        "failure_rows": [
            (
                f,
                dead_letter_list(failure_class=f.failure_class),
                dead_letter_list(failure_class=f.failure_class, open_only=False),
            )
            for f in h.failures
        ],
        "deferred_rows": [
            (r, changelist(OUTREACH_LIST, state__exact=State.QUEUED, blocked_reason=r.reason))
            for r in h.deferred.reasons
        ],
        "latency_rows": [(t, q.count, duration(q.p50_s), duration(q.p95_s)) for t, q in a.latency.items()],
        "kind_rows": [(k, o.completed, o.dead, percent(o.rate)) for k, o in a.success_by_kind.items()],
        "rates": [
            ("retry", "Retries per completed outreach", percent(h.retry_rate)),
            ("dead-letter", "Dead-letter rate", percent(h.dead_letter_rate)),
            ("approval", "Approval rate", percent(h.approval_rate)),
            ("replay-success", "Replays that succeeded (all time)", percent(h.replay_success_rate)),
        ],
        "approval_rate": percent(h.approval_rate),
        "approval_times": (duration(a.time_to_approval.p50_s), duration(a.time_to_approval.p95_s)),
        "tokens_per_completed": number(h.tokens_per_completed),
        "cost_per_completed": number(h.cost_per_completed, places=4),
        "window": f"{h.window_s / 3600:g} h",
        "last_429": duration(h.budget.last_429_age_s),
        "step_latency_rows": [
            (step, q.count, seconds(q.p50_s), seconds(q.p95_s)) for step, q in h.in_flight.latency.items()
        ],
        "job_latency": seconds(h.in_flight.job_latency_s),
        "allowed_rate": number(h.in_flight.rate_per_s, places=2),
        "deliverability_rows": [
            {**asdict(r), "bounce_rate": percent(r.bounce_rate), "complaint_rate": percent(r.complaint_rate)}
            for r in [*h.deliverability.owners, *h.deliverability.domains]
        ],
        "mailbox_rows": [
            {
                **asdict(m),
                "next_send": "now" if m.next_send_at is None else f"{m.next_send_at:%H:%M:%S} UTC",
                "bounce_rate": percent(m.bounce_rate),
                "complaint_rate": percent(m.complaint_rate),
                "state": "active" if m.active else f"paused {m.paused_reason}".strip(),
            }
            for m in h.mailboxes
        ],
        # Per triage class: received in the window, awaiting now (linked: the outreach list, which
        # operators may open; the approval queue is the reviewers'), decided in the window and
        # the approval rate of those decisions.
        "reply_class_rows": [
            {
                **asdict(r),
                "awaiting_url": changelist(
                    OUTREACH_LIST,
                    state__exact=State.AWAITING_APPROVAL,
                    kind__exact=Outreach.Kind.REPLY,
                    reply_class__exact=r.reply_class,
                ),
                "approval_rate": percent(r.approval_rate),
            }
            for r in h.replies
        ],
        "spend_rows": [
            *(
                (o.name, "organization", o.drafts, dollars(o.dollars), dollars(o.cap))
                for o in h.spend.organizations
            ),
            *((o.name, "owner", o.drafts, dollars(o.dollars), DASH) for o in h.spend.owners),
        ],
    }
