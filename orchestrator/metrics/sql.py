"""Query helpers shared by the metrics selectors: time windows on the primary key, percentiles.

PostgreSQL computes percentiles in SQL (percentile_cont); SQLite (the demo's embedded default)
has no ordered-set aggregates, so the same rows are fetched and interpolated by
figures.percentile, whose rule is percentile_cont's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Hashable
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Aggregate, Count, Expression, F, FloatField, Func, Model, QuerySet

from orchestrator.figures import Quantiles, quantiles_of


def for_organizations(
    rows: QuerySet[Any], *, organization_ids: Collection[int] | None, path: str = "owner__organization_id"
) -> QuerySet[Any]:
    """Rows of those organizations only (None: every row, an operator's view). The path is the
    one the admin list behind the figure scopes by (OrganizationScopedAdmin.organization_path),
    so a dashboard figure and the list it links to count the same rows."""
    return rows if organization_ids is None else rows.filter(**{f"{path}__in": organization_ids})


def first_id_since(*, model: type[Model], column: str, since: datetime) -> int:
    """The id after which every row's `column` is >= since (0 when all are).

    Why: OutreachEvent.at and Outreach.created_at are set on insert, so ids grow with them, but
    neither column is indexed. Walking the primary key backwards from the newest row and
    stopping at the first row older than `since` reads only the window's rows (an index scan
    backward with LIMIT 1); every window query can then be `id > boundary`, a primary-key range
    scan: O(rows in the window), never O(history). A row inserted with a back-dated time (a
    backfill, a test) hides older-id rows behind it, so window queries also keep `column >= since`.
    """
    older = model._default_manager.filter(**{f"{column}__lt": since}).order_by("-pk")
    return older.values_list("pk", flat=True).first() or 0


class PercentileCont(Aggregate):
    """percentile_cont(fraction) WITHIN GROUP (ORDER BY expression): PostgreSQL only."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: Any, *, fraction: float) -> None:
        super().__init__(expression, fraction=float(fraction))


class EpochSeconds(Func):
    """An interval in seconds (PostgreSQL)."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)"
    output_field = FloatField()


def quantiles_by(*, rows: QuerySet[Any], group: str, duration: Expression) -> dict[Hashable, Quantiles]:
    """p50/p95 of `duration` (an interval) per value of `group`, over `rows`."""
    rows = rows.order_by()  # a model's default ordering must not reach GROUP BY
    if connection.vendor == "postgresql":
        seconds = EpochSeconds(duration)
        grouped = rows.values(key=F(group)).annotate(
            n=Count("pk"),
            p50=PercentileCont(seconds, fraction=0.5),
            p95=PercentileCont(seconds, fraction=0.95),
        )
        return {r["key"]: Quantiles(count=r["n"], p50_s=r["p50"], p95_s=r["p95"]) for r in grouped}
    found: dict[Hashable, list[float]] = defaultdict(list)
    for key, delta in rows.annotate(duration_=duration).values_list(group, "duration_"):
        found[key].append(_seconds(delta))
    return {key: quantiles_of(values) for key, values in found.items()}


def _seconds(delta: timedelta | float | int) -> float:
    return delta.total_seconds() if isinstance(delta, timedelta) else float(delta) / 1e6
