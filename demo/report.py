"""The demo's report: JSON figures plus PNG charts (requests/min against the limit over time,
share per owner, dispatch latency per tier)."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from demo.live import Sample
from outreach.models import OutreachEvent, State
from outreach.tiers import Tier


def dispatch_latency_by_tier() -> dict[str, list[float]]:
    """Seconds from when each outreach became ready to its first dispatch, per tier."""
    rows = OutreachEvent.objects.filter(to_state=State.DISPATCHED, from_state=State.QUEUED).values_list(
        "outreach_id", "at", "outreach__not_before", "outreach__created_at", "outreach__tier"
    )
    first: dict[int, tuple[float, int]] = {}
    for outreach_id, at, not_before, created, tier in rows.order_by("at"):
        if outreach_id not in first:
            first[outreach_id] = (max(0.0, (at - max(not_before, created)).total_seconds()), tier)
    result: dict[str, list[float]] = {t.name.lower(): [] for t in Tier}
    for seconds, tier in first.values():
        result[Tier(tier).name.lower()].append(seconds)
    return result


def _pct(values: list[float], q: float) -> float | None:
    return round(statistics.quantiles(values, n=100)[int(q) - 1], 2) if len(values) >= 2 else None


def write_report(*, out: Path, samples: list[Sample], rpm_limit: int) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    latency = dispatch_latency_by_tier()
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
        "dispatch_latency_s": {
            t: {"n": len(v), "p50": _pct(v, 50), "p95": _pct(v, 95)} for t, v in latency.items()
        },
    }
    (out / "report.json").write_text(
        json.dumps({"figures": figures, "samples": [asdict(s) for s in samples]}, indent=2)
    )
    _chart_requests(out / "llm_requests_per_min.png", samples=samples, rpm_limit=rpm_limit)
    _chart_owners(out / "share_per_owner.png", sent=last.sent_by_owner if last else {})
    _chart_latency(out / "dispatch_latency_per_tier.png", latency=latency)
    return figures


def _chart_requests(path: Path, *, samples: list[Sample], rpm_limit: int) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(
        [s.t for s in samples],
        [s.sim.get("window", {}).get("requests", 0) for s in samples],
        label="LLM requests in the last 60 s",
    )
    ax.axhline(rpm_limit, color="red", linestyle="--", label=f"provider limit ({rpm_limit}/min)")
    ax.set(
        xlabel="seconds into the demo",
        ylabel="requests / 60 s",
        title="LLM requests per minute against the limit",
    )
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _chart_owners(path: Path, *, sent: dict[str, int]) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    names = sorted(sent)
    ax.barh(names, [sent[n] for n in names])
    ax.set(xlabel="emails sent", title="Share per owner")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _chart_latency(path: Path, *, latency: dict[str, list[float]]) -> None:
    fig, ax = plt.subplots(figsize=(8, 4))
    tiers = [t for t in ("reply", "intro", "nudge") if latency.get(t)]
    if tiers:
        ax.boxplot([latency[t] for t in tiers], tick_labels=tiers)
    ax.set(ylabel="seconds from ready to dispatch", title="Dispatch latency per tier")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
