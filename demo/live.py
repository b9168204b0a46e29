"""What the demo shows each second: queue depth per tier and state, LLM use against the limit,
sent, awaiting approval, dead letters. One `Sample` per tick, kept for the report."""

from __future__ import annotations

import json
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone
from rich.table import Table

from orchestrator.models import DeadLetter
from outreach.models import Outreach, State
from outreach.tiers import Tier


@dataclass
class Sample:
    t: float
    states: dict[str, int]
    ready_by_tier: dict[str, int]
    waiting_by_tier: dict[str, int]
    sent_by_owner: dict[str, int]
    dead_letters: int
    sim: dict[str, Any] = field(default_factory=dict)


def sim_stats(port: int) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=2) as response:
            return dict(json.load(response))
    except OSError:
        return {}


def take_sample(*, started: float, sim_port: int) -> Sample:
    now = timezone.now()
    states = dict(Outreach.objects.values_list("state").annotate(n=Count("id")).values_list("state", "n"))
    queued = (
        Outreach.objects.filter(state=State.QUEUED)
        .values("tier")
        .annotate(
            ready=Count("id", filter=Q(not_before__lte=now)),
            waiting=Count("id", filter=Q(not_before__gt=now)),
        )
    )
    names = {t.value: t.name.lower() for t in Tier}
    sent = Outreach.objects.filter(state=State.SENT).values_list("owner__name").annotate(n=Count("id"))
    return Sample(
        t=round(time.monotonic() - started, 1),
        states={s.value: states.get(s.value, 0) for s in State},
        ready_by_tier={names[row["tier"]]: row["ready"] for row in queued},
        waiting_by_tier={names[row["tier"]]: row["waiting"] for row in queued},
        sent_by_owner=dict(sent.values_list("owner__name", "n")),
        dead_letters=DeadLetter.objects.count(),
        sim=sim_stats(sim_port),
    )


def render(sample: Sample, *, rpm_limit: int) -> Table:
    table = Table(title=f"Outreach demo, {sample.t:.0f}s", show_header=True, header_style="bold")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for tier in ("reply", "intro", "nudge"):
        ready, waiting = sample.ready_by_tier.get(tier, 0), sample.waiting_by_tier.get(tier, 0)
        table.add_row(f"queued {tier} (ready / later)", f"{ready} / {waiting}")
    s = sample.states
    table.add_row(
        "in flight (dispatched, generating, sending)", str(s["dispatched"] + s["generating"] + s["sending"])
    )
    window = sample.sim.get("window", {}).get("requests", 0)
    table.add_row(
        "LLM requests in the last 60 s / limit", f"{window} / {rpm_limit} ({100 * window / rpm_limit:.0f}%)"
    )
    table.add_row("provider 429s", str(sample.sim.get("rejected_429", 0)))
    table.add_row("sent", str(s["sent"]))
    table.add_row("awaiting approval", str(s["awaiting_approval"]))
    table.add_row("dead letters", str(sample.dead_letters))
    return table
