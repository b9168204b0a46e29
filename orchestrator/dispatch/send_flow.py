"""Approved drafts go to `send` no faster than the mail provider takes them.

The send worker reserves each message of the send budget right before SMTP
(nurture.mail.sending); this is flow control in front of it. With a send rate configured, each
cycle hands out only what the rate sends in SEND_LOOKAHEAD cycles, less the sends already in
flight: 5,000 approvals at once leave PostgreSQL a cycle's worth at a time, instead of 5,000
tasks in the broker whose workers would spin on the budget. The rest stay APPROVED, and the
rows looked at but not handed out say why they wait. Without a rate: no limit (today's
behaviour). Who gets the cycle's sends is the pure selection's call (`selection.select_sends`:
owner weights, a cursor persisted between cycles), not this module's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from django.conf import settings

from orchestrator.budget import Budget
from outreach.models import Outreach, State

# Cycles of sends handed out ahead: one that leaves now, one queued behind it, so the send
# workers never run dry between two cycles (the dispatcher is late now and then).
SEND_LOOKAHEAD = 2


def send_slots(*, rate_per_s: float | None, interval_s: float, in_flight: int) -> int | None:
    """How many approved drafts this cycle may hand to `send` (None: no send rate, no limit)."""
    if rate_per_s is None:
        return None
    return max(0, math.ceil(rate_per_s * interval_s * SEND_LOOKAHEAD) - in_flight)


def sends_in_flight() -> int:
    """Drafts handed to `send` and not yet sent (outreach_in_flight_age: the in-flight rows)."""
    return Outreach.objects.filter(state__in=[State.DISPATCHED, State.SENDING]).exclude(draft_body="").count()


def approved_slots(*, budget: Budget) -> int | None:
    """This cycle's sends by the budget's rate (None: no send rate configured)."""
    rate = budget.send_rules.rate_per_s
    if rate is None:
        return None
    return send_slots(rate_per_s=rate, interval_s=settings.DISPATCH_INTERVAL, in_flight=sends_in_flight())


def waiting_label(*, ids: Sequence[int], budget: Budget) -> None:
    """Say on approved rows left behind by the rate why they wait (written only on change)."""
    if ids:
        reason = f"send rate {budget.send_rules.rate_label} reached"
        Outreach.objects.filter(id__any=ids, state=State.APPROVED).exclude(blocked_reason=reason).update(
            blocked_reason=reason
        )
