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

What each figure means (percentiles, retry rate) is defined once, in orchestrator/figures.py: pure
functions that the demo report and the benchmarks call too. charts.py draws the SVG charts of
the dashboard and of the demo report.
"""
