"""Plain factory functions for tests: real rows in the test database, sensible defaults."""

from __future__ import annotations

import itertools
from datetime import time
from typing import Any

from django.utils import timezone

from outreach.models import Lead, Organization, Outreach, Owner, OwnerDailySends, State

_seq = itertools.count(1)


def make_org(**overrides: Any) -> Organization:
    return Organization.objects.create(**{"name": f"Org {next(_seq)}", **overrides})


def make_owner(*, organization: Organization | None = None, **overrides: Any) -> Owner:
    fields: dict[str, Any] = {
        "organization": organization or make_org(),
        "name": f"Owner {next(_seq)}",
        "kind": Owner.Kind.AGENT,
        "daily_limit": 50,
        "hours_start": time(0, 0),
        "hours_end": time(23, 59),
        "working_days": "1234567",
        "timezone": "UTC",
    }
    return Owner.objects.create(**{**fields, **overrides})


def make_lead(*, owner: Owner | None = None, **overrides: Any) -> Lead:
    owner = owner or make_owner()
    n = next(_seq)
    fields: dict[str, Any] = {
        "organization_id": owner.organization_id,
        "owner": owner,
        "email": f"lead{n}@prospect.example",
        "first_name": "Pat",
        "last_name": f"Lead{n}",
        "company": "Acme",
        "title": "CTO",
    }
    return Lead.objects.create(**{**fields, **overrides})


def make_outreach(*, lead: Lead | None = None, state: State = State.QUEUED, **overrides: Any) -> Outreach:
    lead = lead or make_lead()
    kind = overrides.pop("kind", Outreach.Kind.INTRO)
    now = timezone.now()
    fields: dict[str, Any] = {
        "lead": lead,
        "owner_id": lead.owner_id,
        "kind": kind,
        "tier": Outreach.KIND_TIER[kind],
        "state": state,
        "not_before": now,
        "idempotency_key": f"test:{next(_seq)}",
        "state_changed_at": now,
    }
    outreach = Outreach.objects.create(**{**fields, **overrides})
    if outreach.state == State.SENT and outreach.sent_at:  # as the SENT transition counts it
        OwnerDailySends.objects.record(owner_id=outreach.owner_id, sent_at=outreach.sent_at)
    return outreach
