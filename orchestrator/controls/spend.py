"""LLM spend: what a written outreach cost, and the UTC day an organization's daily cap counts.

Prices come from LLM_PRICES (dollars per 1,000 input and per 1,000 output tokens, per model);
a model without a price costs 0 (spend is then simply not tracked for it). The day is UTC's:
organizations have no time zone, and one boundary for all keeps the cap's reason exact
("resumes 00:00 UTC"). Pure functions; the worker stores the cost (nurture.writing.generation) and the
dispatcher sums it, with its work in flight each at `job_cost_estimate` of its owner's learned
tokens (orchestrator.dispatch.reads.organization_spend, the admission's rule 7).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal

Prices = Mapping[str, tuple[Decimal, Decimal]]
PLACES = Decimal("0.000001")  # Outreach.llm_cost's precision


def llm_cost(*, prices: Prices, model: str, input_tokens: int, output_tokens: int) -> Decimal:
    """Dollars for these tokens at the model's price, rounded to the stored micro-dollar."""
    given, taken = prices.get(model, (Decimal(0), Decimal(0)))
    return ((input_tokens * given + output_tokens * taken) / 1000).quantize(PLACES)


def job_cost_estimate(*, prices: Prices, models: Iterable[str], tokens: int) -> Decimal:
    """What one job in flight is counted at against a spend cap before it is written: the
    tokens it reserves at the dearest price (input or output) of the models it may use, so
    work in flight never lets a cap be passed. 0 when none of them has a price."""
    dearest = max((max(prices[m]) for m in models if m in prices), default=Decimal(0))
    return (tokens * dearest / 1000).quantize(PLACES)


def spend_day(now: datetime) -> tuple[datetime, datetime]:
    """The UTC day `now` falls in: its start and the next day's."""
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + timedelta(days=1)


def spend_cap_reason(cap: Decimal) -> str:
    """What a capped organization's queued work says while it waits (Outreach.blocked_reason)."""
    return f"daily spend cap ${cap:.2f} reached, resumes 00:00 UTC"
