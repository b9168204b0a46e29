"""What the pipeline did in a recent window, read from the transition history (OutreachEvent).

Every query starts from `window_events()`: a primary-key range (see sql.first_id_since), so it
costs the window's events, and each joins its outreach by primary key. Definitions:
- completed: the pipeline finished its part: an autonomous email SENT, or a review draft
  reaching AWAITING_APPROVAL (the person's wait after that is approval time, not latency);
- latency: from when the work fell due to completion. Due is created_at, or not_before when
  later (nudges are created at assignment, days before they are due; a retried row counts
  from its last backoff; a reply is due at the end of its quiet period, the lead's last
  message + REPLY_QUIET_S, nurture.quiet: the wait we chose is policy, not latency, and the
  lead's own burst is theirs), never after the completion itself;
- retries: transient failures sent back to the queue with backoff (events with error_class
  TRANSIENT); budget waits (paced, 429) are not retries (figures.retry_rate);
- generated: a draft written (GENERATING -> AWAITING_APPROVAL or -> DISPATCHED for sending);
  tokens_used and llm_calls are written then, so tokens per completed outreach and
  llm_requests come from these rows.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
)
from django.db.models.functions import Greatest, Least

from orchestrator.dispatch.owner_limits import owner_rules
from orchestrator.dispatch.reads import Committed, committed_today
from orchestrator.figures import EMPTY, Quantiles, ratio
from orchestrator.metrics.depth import TIER_NAMES
from orchestrator.metrics.sql import first_id_since, for_organizations, quantiles_by
from outreach.models import ErrorClass, Outreach, OutreachEvent, Owner, State, working_days_text

COMPLETED = Q(to_state=State.AWAITING_APPROVAL) | Q(to_state=State.SENT, outreach__approved_at__isnull=True)
GENERATED = Q(from_state=State.GENERATING, to_state__in=[State.AWAITING_APPROVAL, State.DISPATCHED])
APPROVED = Q(from_state=State.AWAITING_APPROVAL, to_state=State.APPROVED)
REJECTED = Q(from_state=State.AWAITING_APPROVAL, to_state=State.REJECTED)
CLAIMED = Q(to_state=State.DISPATCHED, from_state__in=[State.QUEUED, State.APPROVED])  # dispatcher claims


@dataclass(frozen=True)
class KindOutcome:
    completed: int
    dead: int
    rate: float | None


@dataclass(frozen=True)
class OwnerShare:
    owner_id: int
    name: str
    kind: str
    sent_1h: int
    sent_24h: int
    dispatched_1h: int
    dispatched_24h: int
    share_sent_24h: float | None
    # Today in the owner's local day, against its daily limit (the admission's rules 3 and 5):
    # sent, and committed = sent + in flight + drafts awaiting approval or approved, unsent.
    daily_limit: int = 0
    sent_today: int = 0
    committed_today: int = 0
    drafts: int = 0
    working_days: str = ""  # weekday names, e.g. "Mon-Fri"


@dataclass(frozen=True)
class Activity:
    completed: int
    sent: int
    dead: int
    retries: int
    provider_429s: int
    generated: int
    llm_requests: int
    tokens: int
    cost: float  # dollars: the drafts' stored llm_cost (LLM_PRICES, orchestrator.controls.spend)
    approved: int
    rejected: int
    latency: dict[str, Quantiles]
    success_by_kind: dict[str, KindOutcome]
    time_to_approval: Quantiles


def window_events(*, since: datetime) -> QuerySet[OutreachEvent]:
    boundary = first_id_since(model=OutreachEvent, column="at", since=since)
    return OutreachEvent.objects.filter(id__gt=boundary, at__gte=since).order_by()


def recent_activity(*, since: datetime, organization_ids: Collection[int] | None = None) -> Activity:
    """With `organization_ids`, the work of those organizations' owners only."""
    events = for_organizations(
        window_events(since=since), organization_ids=organization_ids, path="outreach__owner__organization_id"
    )
    totals = events.aggregate(
        completed=Count("id", filter=COMPLETED),
        sent=Count("id", filter=Q(to_state=State.SENT)),
        dead=Count("id", filter=Q(to_state=State.DEAD)),
        retries=Count("id", filter=Q(error_class=ErrorClass.TRANSIENT)),
        provider_429s=Count("id", filter=Q(error_class=ErrorClass.RATE_LIMITED)),
        approved=Count("id", filter=APPROVED),
        rejected=Count("id", filter=REJECTED),
    )
    usage = events.filter(GENERATED).aggregate(
        generated=Count("id"),
        llm_requests=Sum("outreach__llm_calls"),
        tokens=Sum("outreach__tokens_used"),
        cost=Sum("outreach__llm_cost"),
    )
    return Activity(
        **totals,
        generated=usage["generated"],
        llm_requests=usage["llm_requests"] or 0,
        tokens=usage["tokens"] or 0,
        cost=float(usage["cost"] or 0),
        latency=latency_by_tier(events=events),
        success_by_kind=success_by_kind(events=events),
        time_to_approval=time_to_approval(events=events),
    )


def latency_by_tier(*, events: QuerySet[OutreachEvent]) -> dict[str, Quantiles]:
    due = Greatest(F("outreach__created_at"), Least(F("outreach__not_before"), F("at")))
    waited = ExpressionWrapper(
        F("at") - ExpressionWrapper(due, output_field=DateTimeField()), output_field=DurationField()
    )
    found = quantiles_by(rows=events.filter(COMPLETED), group="outreach__tier", duration=waited)
    return {name: found.get(tier, EMPTY) for tier, name in TIER_NAMES.items()}


def success_by_kind(*, events: QuerySet[OutreachEvent]) -> dict[str, KindOutcome]:
    rows = events.values("outreach__kind").annotate(
        completed=Count("id", filter=COMPLETED), dead=Count("id", filter=Q(to_state=State.DEAD))
    )
    found = {r["outreach__kind"]: (r["completed"], r["dead"]) for r in rows}
    result = {}
    for kind in Outreach.Kind.values:
        completed, dead = found.get(kind, (0, 0))
        result[kind] = KindOutcome(completed, dead, ratio(completed, completed + dead))
    return result


def time_to_approval(*, events: QuerySet[OutreachEvent]) -> Quantiles:
    """From entering AWAITING_APPROVAL to the approval (the event's `at` is the outreach's
    approved_at). The entry is the latest one before the approval: index (outreach, at)."""
    entered = OutreachEvent.objects.filter(
        outreach_id=OuterRef("outreach_id"), to_state=State.AWAITING_APPROVAL, at__lte=OuterRef("at")
    ).order_by("-at", "-id")
    waited = ExpressionWrapper(F("at") - Subquery(entered.values("at")[:1]), output_field=DurationField())
    # One group: every approval leaves AWAITING_APPROVAL.
    found = quantiles_by(rows=events.filter(APPROVED), group="from_state", duration=waited)
    return found.get(State.AWAITING_APPROVAL, EMPTY)


def owner_share(*, now: datetime, organization_ids: Collection[int] | None = None) -> list[OwnerShare]:
    """Sent and dispatched per owner over the last hour and day: every active owner (zeros show
    who is starved) plus inactive ones that still had activity. O(owners + the day's events).

    With `organization_ids`, only those organizations' owners (a tenant's dashboard: another
    organization's owner names are theirs); shares are then of those owners' sends."""
    hour = Q(at__gte=now - timedelta(hours=1))
    events = window_events(since=now - timedelta(days=1))
    owners = Owner.objects.all()
    if organization_ids is not None:
        events = events.filter(outreach__owner__organization_id__in=organization_ids)
        owners = owners.filter(organization_id__in=organization_ids)
    rows = (
        events.filter(Q(to_state=State.SENT) | CLAIMED)
        .values("outreach__owner_id")
        .annotate(
            sent_1h=Count("id", filter=Q(to_state=State.SENT) & hour),
            sent_24h=Count("id", filter=Q(to_state=State.SENT)),
            dispatched_1h=Count("id", filter=CLAIMED & hour),
            dispatched_24h=Count("id", filter=CLAIMED),
        )
    )
    counts = {r.pop("outreach__owner_id"): r for r in rows}
    owners = owners.filter(Q(active=True) | Q(id__in=list(counts))).order_by("name", "id")
    zero = dict.fromkeys(("sent_1h", "sent_24h", "dispatched_1h", "dispatched_24h"), 0)
    sent_day = sum(c["sent_24h"] for c in counts.values())
    result = []
    listed = list(
        owners.only(
            "id", "name", "kind", "daily_limit", "hours_start", "hours_end", "working_days", "timezone"
        )
    )
    committed = committed_today(owners=[owner_rules(o) for o in listed], now=now)
    for owner in listed:
        found = counts.get(owner.pk, zero)
        share = ratio(found["sent_24h"], sent_day)
        today = committed.get(owner.pk, Committed())
        result.append(
            OwnerShare(
                owner.pk,
                owner.name,
                owner.kind,
                **found,
                share_sent_24h=share,
                daily_limit=owner.daily_limit,
                sent_today=today.sent,
                committed_today=today.sent + today.in_flight + today.drafts,
                drafts=today.drafts,
                working_days=working_days_text(owner.working_days),
            )
        )
    return result
