"""Queue-health figures, computed once per call and shared by the admin dashboard,
`manage.py queue_stats` and the Prometheus `/metrics` endpoint (one source for all three).

`queue_health()` (health.py) reads:
- now (depth.py): rows per state and tier, ready rows, the oldest ready row's wait, deferred
  work by reason: queries on the queue's partial indexes (cost grows with the queue, not history);
- the recent window (activity.py, METRICS_WINDOW_S, default 24 h): latency per tier, retries,
  429s, outcomes per kind, tokens and cost, approvals, share per owner: primary-key ranges of
  the transition history (cost grows with the window's events);
- dead letters (dead_letter_classes.py) and the LLM budget (budget_use.py: the live Redis
  snapshot and the last hour of per-minute samples);
- LLM work in flight (in_flight.py): the count against the dispatcher's Little's-law target and
  the observed provider latency per step the target is sized on.

What each figure means (percentiles, retry rate) is defined once, in figures.py: pure
functions that the demo report and the benchmarks call too. charts.py draws the SVG charts of
the dashboard and of the demo report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from orchestrator.metrics.budget_use import budget_sample_record
    from orchestrator.metrics.health import QueueHealth, queue_health

__all__ = ["QueueHealth", "budget_sample_record", "queue_health"]

_LAZY = {
    "QueueHealth": "orchestrator.metrics.health",
    "queue_health": "orchestrator.metrics.health",
    "budget_sample_record": "orchestrator.metrics.budget_use",
}


def __getattr__(name: str) -> Any:
    """Import the selectors on first use. Why: the package's pure module (figures.py) must be
    importable by a benchmark before Django is set up, and importing the package runs this file;
    the selectors import the models, which need a configured Django."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(_LAZY[name]), name)
