"""The definitions of the figures every view and benchmark reports: one formula each.

Pure: no Django, no database. The dashboard, `queue_stats`, `/metrics`, the demo report and
the benchmarks (bench/*.py, which import this before Django is set up, or never set it up)
all compute percentiles, rates, utilization and fairness here, so a figure with the same name
means the same thing everywhere. The figures that need the database (latency per tier, retries and completed work
in a window) have one selector each in activity.py, built on these.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Quantiles:
    count: int
    p50_s: float | None
    p95_s: float | None


EMPTY = Quantiles(count=0, p50_s=None, p95_s=None)


def percentile(*, values: Iterable[float], fraction: float) -> float | None:
    """The `fraction` (0..1) percentile of `values`, in any order; None when there are none.

    Rule: linear interpolation between the two nearest ranks of the sorted values, at position
    fraction * (n - 1) (0-based). That is PostgreSQL's `percentile_cont`, so the figures that
    PostgreSQL computes in SQL and the ones computed here agree; it is also numpy's default
    ("linear") and `statistics.quantiles(method="inclusive")`. One value is every percentile of
    itself; the result never lies outside the values (p0 is the minimum, p100 the maximum).
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within 0..1, not {fraction}")
    ordered = sorted(values)
    if not ordered:
        return None
    position = fraction * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def quantiles_of(values: Iterable[float]) -> Quantiles:
    """Count, p50 and p95 of `values` (seconds)."""
    ordered = sorted(values)
    return Quantiles(
        count=len(ordered),
        p50_s=percentile(values=ordered, fraction=0.5),
        p95_s=percentile(values=ordered, fraction=0.95),
    )


def ratio(part: float, whole: float) -> float | None:
    """part / whole; None (no data), not 0 or a division error, when `whole` is 0."""
    return part / whole if whole else None


def per_minute(*, count: float, seconds: float) -> float | None:
    """`count` events in `seconds`, per minute; None when no time passed."""
    return ratio(60 * count, seconds)


def utilization(*, used: float, limit_per_min: float, seconds: float) -> float | None:
    """The share of a per-minute limit (requests or tokens) that `used`, admitted over
    `seconds`, took: used / (limit_per_min x seconds / 60). 1.0 is the whole limit; a figure
    above 1 means the limit was not held. None with no time or no limit."""
    return ratio(used, limit_per_min * seconds / 60)


def jain_index(*, shares: Iterable[float]) -> float | None:
    """Jain's fairness index of `shares` (what each owner got, one value each):
    (sum x)^2 / (n x sum x^2). 1.0 when every owner got the same, 1/n when one got everything.
    None with no owners or nothing shared (all zero): an idle run is neither fair nor unfair."""
    values = list(shares)
    total, squares = sum(values), sum(v * v for v in values)
    return ratio(total * total, len(values) * squares)


def retry_rate(*, retries: int, completed: int) -> float | None:
    """Transient retries per completed outreach.

    A retry is a failed attempt run again after backoff (a 5xx, a timeout, a dropped
    connection); completed is work the pipeline finished (sent, or a draft parked for review).
    Waiting for budget (our pacer, or a provider 429 that hands the work back with its wait) is
    not a failed attempt: 429s are their own figure. See activity.py for the selectors.
    """
    return ratio(retries, completed)


def window_counts(*, times: Iterable[float], window_s: float) -> list[int]:
    """For each event (seconds, any order; sorted here), how many events fall in the `window_s`
    window starting at it, itself included: the figure a provider's per-second or per-minute
    limit is about. The busiest window starts at an event, so these cover it."""
    ordered = sorted(times)
    return [bisect.bisect_left(ordered, t + window_s) - i for i, t in enumerate(ordered)]


def most_in_window(*, times: Iterable[float], window_s: float) -> int:
    """The most events within any `window_s` (0 when there are none)."""
    return max(window_counts(times=times, window_s=window_s), default=0)


def event_rate(*, times: Iterable[float]) -> float | None:
    """Events per second from the first to the last (None with fewer than two, or no span)."""
    ordered = sorted(times)
    if len(ordered) < 2 or ordered[-1] == ordered[0]:
        return None
    return (len(ordered) - 1) / (ordered[-1] - ordered[0])
