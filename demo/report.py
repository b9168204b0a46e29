"""The demo's report: JSON figures plus SVG charts (LLM requests/min against the limit over
the run, share per owner, latency per tier), drawn by the dashboard's chart module and
computed by the dashboard's selectors, so a figure means here what it means there."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

from django.utils import timezone

from demo.live import Sample
from orchestrator.figures import retry_rate
from orchestrator.metrics.activity import owner_share, recent_activity
from orchestrator.metrics.charts import latency_chart, owner_share_chart, requests_chart, svg_document

CHARTS = ("llm_requests_per_min.svg", "share_per_owner.svg", "latency_per_tier.svg")


def write_report(*, out: Path, samples: list[Sample], rpm_limit: int, started_at: datetime) -> dict[str, Any]:
    """Figures of the run that began at `started_at` into `out`/report.json, and the charts."""
    out.mkdir(parents=True, exist_ok=True)
    now = timezone.now()
    activity = recent_activity(since=started_at)
    last = samples[-1] if samples else None
    figures: dict[str, Any] = {
        "duration_s": last.t if last else 0,
        "states": last.states if last else {},
        "sent_by_owner": last.sent_by_owner if last else {},
        "dead_letters": last.dead_letters if last else 0,
        "llm": {
            k: (last.sim.get(k) if last else None) for k in ("requests", "admitted", "rejected_429", "tokens")
        },
        "llm_peak_window": last.sim.get("peak_window") if last else None,
        "rpm_limit": rpm_limit,
        "latency_s": {tier: asdict(q) for tier, q in activity.latency.items()},
        "completed": activity.completed,
        "retries": activity.retries,
        "retry_rate": retry_rate(retries=activity.retries, completed=activity.completed),
    }
    (out / "report.json").write_text(
        json.dumps({"figures": figures, "samples": [asdict(s) for s in samples]}, indent=2)
    )
    requests = [(s.t, int(s.sim.get("window", {}).get("requests", 0))) for s in samples]
    charts = (
        requests_chart(points=requests, limit=rpm_limit),
        owner_share_chart(owners=owner_share(now=now)),
        latency_chart(latency=activity.latency),
    )
    for name, chart in zip(CHARTS, charts, strict=True):
        (out / name).write_text(svg_document(chart))
    return figures
