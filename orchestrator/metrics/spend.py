"""LLM spend today (the UTC day, orchestrator.controls.spend.spend_day): per owner and per organization, with
each organization's daily cap, for the dashboard's figures, `queue_stats --json` and /metrics.

Two grouped sums over the drafts written today (index outreach_spend_by_owner); scoped like the
owners' shares: `organization_ids` limits the rows to those organizations.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Sum

from orchestrator.controls.spend import spend_day
from outreach.models import Organization, Outreach


@dataclass(frozen=True)
class SpendRow:
    id: int
    name: str
    drafts: int  # written today with a price
    dollars: float
    cap: float | None = None  # organizations: Organization.daily_spend_cap


@dataclass(frozen=True)
class Spend:
    since: datetime  # the UTC day's start
    owners: list[SpendRow]
    organizations: list[SpendRow]


def spend_today(*, now: datetime, organization_ids: Collection[int] | None = None) -> Spend:
    start, _ = spend_day(now)
    rows = Outreach.objects.filter(generated_at__gte=start, llm_cost__gt=0)
    orgs = Organization.objects.all()
    if organization_ids is not None:
        rows = rows.filter(owner__organization_id__in=list(organization_ids))
        orgs = orgs.filter(id__in=list(organization_ids))
    by_owner = rows.values("owner_id", "owner__name").annotate(n=Count("id"), total=Sum("llm_cost"))
    by_org = {
        r["owner__organization_id"]: (r["n"], r["total"])
        for r in rows.values("owner__organization_id").annotate(n=Count("id"), total=Sum("llm_cost"))
    }
    return Spend(
        since=start,
        owners=[
            SpendRow(id=r["owner_id"], name=r["owner__name"], drafts=r["n"], dollars=float(r["total"]))
            for r in by_owner.order_by("owner_id")
        ],
        organizations=[
            SpendRow(
                id=org.pk,
                name=org.name,
                drafts=by_org.get(org.pk, (0, 0))[0],
                dollars=float(by_org.get(org.pk, (0, 0))[1]),
                cap=None if org.daily_spend_cap is None else float(org.daily_spend_cap),
            )
            for org in orgs.order_by("id")
            if org.pk in by_org or org.daily_spend_cap is not None
        ],
    )
