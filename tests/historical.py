"""Rows for migration tests, written through the historical models of the migration state the
test is in. The factories use today's models, which name columns an older schema does not have
yet (a field added in a later migration breaks every test that builds rows at an older one)."""

from __future__ import annotations

import itertools
from datetime import time
from typing import Any

from django.apps.registry import Apps
from django.utils import timezone

from outreach.tiers import Tier

_seq = itertools.count(1)


def historical_outreach(apps: Apps, **owner: Any) -> Any:
    """An intro outreach (with its organization, owner and lead) as the schema in `apps` has it."""
    n = next(_seq)
    org = apps.get_model("outreach", "Organization").objects.create(name=f"Historical org {n}")
    owner_row = apps.get_model("outreach", "Owner").objects.create(
        organization=org,
        name=f"Historical owner {n}",
        kind="agent",
        daily_limit=50,
        hours_start=time(0),
        hours_end=time(23, 59),
        working_days="1234567",
        **{"timezone": "UTC", **owner},
    )
    lead = apps.get_model("outreach", "Lead").objects.create(
        organization=org, owner=owner_row, email=f"lead{n}@historical.example"
    )
    now = timezone.now()
    return apps.get_model("outreach", "Outreach").objects.create(
        lead=lead,
        owner=owner_row,
        kind="intro",
        tier=int(Tier.INTRO),
        state="queued",
        not_before=now,
        idempotency_key=f"historical:{n}",
        state_changed_at=now,
    )
