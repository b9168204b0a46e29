"""The queue-health snapshot: every figure of the dashboard, `queue_stats` and `/metrics`,
computed once per call (see the package docstring for what is read and what it costs)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from orchestrator.budget import Budget, get_budget
from orchestrator.controls.deliverability import Deliverability, MailRates, deliverability
from orchestrator.controls.mailboxes import MailboxStatus, mailbox_status
from orchestrator.failures.dead_letters import replay_success_rate
from orchestrator.figures import ratio, retry_rate
from orchestrator.metrics.activity import Activity, OwnerShare, owner_share, recent_activity
from orchestrator.metrics.budget_use import (
    BudgetNow,
    BudgetPoint,
    budget_last_hour,
    budget_now,
)
from orchestrator.metrics.dead_letter_classes import FailureClass, dead_letter_classes, oldest_open_age_s
from orchestrator.metrics.deployments import DeploymentNow, deployments_now
from orchestrator.metrics.depth import Deferred, Depth, deferred_work, queue_depth
from orchestrator.metrics.holds import ActivePause, RejectionReason, active_pauses, rejections_by_reason
from orchestrator.metrics.in_flight import InFlightNow, in_flight_now
from orchestrator.metrics.replies import ReplyClassFigures, reply_classes
from orchestrator.metrics.spend import Spend, spend_today
from orchestrator.metrics.sql import for_organizations
from orchestrator.models import DeadLetter

DEFAULT_WINDOW_S = 86_400


@dataclass(frozen=True)
class QueueHealth:
    generated_at: datetime
    window_s: int
    depth: Depth
    activity: Activity
    owners: list[OwnerShare]
    deferred: Deferred
    failures: list[FailureClass]
    oldest_open_dead_letter_age_s: float | None
    dead_letters: int
    replay_success_rate: float | None
    budget: BudgetNow
    budget_last_hour: list[BudgetPoint]
    in_flight: InFlightNow
    pauses: list[ActivePause]
    rejections: list[RejectionReason]
    deployments: list[DeploymentNow]
    deliverability: Deliverability  # bounce and complaint rates per owner and sender domain
    spend: Spend
    mailboxes: list[MailboxStatus]  # each mailbox's day, cap, warm-up step, next send, rates
    replies: list[ReplyClassFigures]  # per triage class: received, awaiting, approved, rejected

    @property
    def retry_rate(self) -> float | None:
        """Transient retries per completed outreach (figures.retry_rate)."""
        return retry_rate(retries=self.activity.retries, completed=self.activity.completed)

    @property
    def dead_letter_rate(self) -> float | None:
        """Share of finished work (completed or dead) that died."""
        return ratio(self.activity.dead, self.activity.completed + self.activity.dead)

    @property
    def approval_rate(self) -> float | None:
        return ratio(self.activity.approved, self.activity.approved + self.activity.rejected)

    @property
    def tokens_per_completed(self) -> float | None:
        return ratio(self.activity.tokens, self.activity.generated)

    @property
    def cost_per_completed(self) -> float | None:
        # What each draft cost at LLM_PRICES when it was written (orchestrator.controls.spend).
        return ratio(self.activity.cost, self.activity.generated)

    def as_json(self) -> dict[str, Any]:
        """The contract's keys at the top (`states`, `tiers`, `oldest_queued_age_s`, `sent`,
        `dead_letters`, `retries`, `provider_429s`, `llm_requests`), then every other figure."""
        a, d = self.activity, self.depth
        return _jsonable(
            {
                "generated_at": self.generated_at.isoformat(),
                "window_s": self.window_s,
                "states": d.states,
                "tiers": d.tiers,
                "oldest_queued_age_s": d.oldest_ready_age_s,
                "sent": d.states["sent"],
                "dead_letters": self.dead_letters,
                "retries": a.retries,
                "provider_429s": a.provider_429s,
                "llm_requests": a.llm_requests,
                "ready_by_tier": d.ready_by_tier,
                "oldest_queued_age_s_by_tier": d.oldest_ready_age_s_by_tier,
                "window": {k: v for k, v in asdict(a).items() if isinstance(v, int)},
                "latency_s": {tier: asdict(q) for tier, q in a.latency.items()},
                "rates": {
                    "retry": self.retry_rate,
                    "dead_letter": self.dead_letter_rate,
                    "approval": self.approval_rate,
                    "replay_success": self.replay_success_rate,
                },
                "success_by_kind": {kind: asdict(o) for kind, o in a.success_by_kind.items()},
                "tokens": {
                    "per_completed": self.tokens_per_completed,
                    "cost_per_completed": self.cost_per_completed,
                },
                "approvals": {"time_to_approval_s": asdict(a.time_to_approval)},
                "dead_letter_classes": [asdict(f) for f in self.failures],
                "oldest_open_dead_letter_age_s": self.oldest_open_dead_letter_age_s,
                "owners": [asdict(o) for o in self.owners],
                "deferred": asdict(self.deferred),
                "budget": {
                    "now": asdict(self.budget),
                    "last_hour": [asdict(p) for p in self.budget_last_hour],
                },
                "in_flight": asdict(self.in_flight),
                "pauses": [asdict(p) for p in self.pauses],
                "rejected_by_reason": [asdict(r) for r in self.rejections],
                "deployments": [asdict(d) for d in self.deployments],
                "deliverability": _deliverability_json(self.deliverability),
                "spend": asdict(self.spend),
                "mailboxes": [asdict(m) for m in self.mailboxes],
                "reply_classes": {
                    r.reply_class: {**asdict(r), "approval_rate": r.approval_rate} for r in self.replies
                },
            }
        )


def queue_health(
    *,
    now: datetime | None = None,
    budget: Budget | None = None,
    organization_ids: Collection[int] | None = None,
) -> QueueHealth:
    """`organization_ids` scopes every figure of the organizations' own work (depth, the window,
    owners, deferred work, dead letters, pauses, rejection reasons) to those organizations'
    owners' rows, as their admin lists are; pauses: theirs and the global ones that stop their
    work. The LLM budget and the in-flight sizing stay system-wide: all organizations share one
    provider key and one dispatcher, and those figures name no organization's rows."""
    now = now or timezone.now()
    window_s = int(getattr(settings, "METRICS_WINDOW_S", DEFAULT_WINDOW_S))
    since = now - timedelta(seconds=window_s)
    return QueueHealth(
        generated_at=now,
        window_s=window_s,
        depth=queue_depth(now=now, organization_ids=organization_ids),
        activity=recent_activity(since=since, organization_ids=organization_ids),
        owners=owner_share(now=now, organization_ids=organization_ids),
        deferred=deferred_work(organization_ids=organization_ids),
        failures=dead_letter_classes(organization_ids=organization_ids),
        oldest_open_dead_letter_age_s=oldest_open_age_s(now=now, organization_ids=organization_ids),
        dead_letters=for_organizations(
            DeadLetter.objects.all(),
            organization_ids=organization_ids,
            path="outreach__owner__organization_id",
        ).count(),
        replay_success_rate=replay_success_rate(),
        budget=budget_now(budget=budget),
        budget_last_hour=budget_last_hour(now=now),
        in_flight=in_flight_now(budget=budget),
        pauses=active_pauses(organization_ids=organization_ids),
        rejections=rejections_by_reason(since=since, organization_ids=organization_ids),
        deployments=deployments_now(budget=budget),
        deliverability=deliverability(organization_ids=organization_ids),
        spend=spend_today(now=now, organization_ids=organization_ids),
        mailboxes=mailbox_status(budget=budget or get_budget(), organization_ids=organization_ids),
        replies=reply_classes(since=since, organization_ids=organization_ids),
    )


def _deliverability_json(d: Deliverability) -> dict[str, Any]:
    """Each scope's counts and its rates (properties, which asdict leaves out)."""

    def row(r: MailRates) -> dict[str, Any]:
        return {**asdict(r), "bounce_rate": r.bounce_rate, "complaint_rate": r.complaint_rate}

    return {
        "window_sends": d.window_sends,
        "owners": [row(r) for r in d.owners],
        "sender_domains": [row(r) for r in d.domains],
    }


def _jsonable(value: Any) -> Any:
    """Datetimes as ISO strings, recursively (the rest is already JSON)."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value
