"""SVG charts of the queue-health dashboard and of the demo report: plain markup, no
JavaScript, no CDN, no plotting library.

Pure functions of the figures: each returns one <svg> with a stable id and `qh-*` classes,
styled by the dashboard template (which also makes them follow the admin's dark mode) or, as a
file of its own, by `svg_document()`.
Markup is built with f-strings of numbers we computed; every piece of text goes through
`escape()` (owner names are user data), and only the finished <svg> is marked safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

if TYPE_CHECKING:  # types only: a benchmark draws charts without a configured Django
    from orchestrator.figures import Quantiles
    from orchestrator.metrics.activity import OwnerShare
    from orchestrator.metrics.budget_use import BudgetPoint

WIDTH, LEFT, RIGHT, TOP, BOTTOM = 720, 64, 16, 30, 30
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Frame:
    """One chart's plot area: maps values onto pixels (y grows downwards in SVG)."""

    height: int
    y_max: float

    @property
    def plot_w(self) -> float:
        return WIDTH - LEFT - RIGHT

    def y(self, value: float) -> float:
        return TOP + (self.height - TOP - BOTTOM) * (1 - min(value, self.y_max) / self.y_max)


def _svg(*, chart_id: str, title: str, height: int, parts: Iterable[str]) -> SafeString:
    return mark_safe(  # numbers we computed; text escaped in _text()
        f'<svg id="{chart_id}" class="qh-chart" role="img" aria-labelledby="{chart_id}-title" '
        f'viewBox="0 0 {WIDTH} {height}" width="100%" xmlns="http://www.w3.org/2000/svg">'
        f'<title id="{chart_id}-title">{escape(title)}</title>{"".join(parts)}</svg>'
    )


def _text(x: float, y: float, text: str, *, anchor: str = "start", cls: str = "qh-label") -> str:
    return f'<text x="{x:.1f}" y="{y:.1f}" class="{cls}" text-anchor="{anchor}">{escape(text)}</text>'


def _rect(x: float, y: float, w: float, h: float, cls: str, tip: str = "") -> str:
    title = f"<title>{escape(tip)}</title>" if tip else ""
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(0.0, w):.1f}" height="{max(0.0, h):.1f}" class="{cls}">{title}</rect>'


def _number(value: float) -> str:
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    return f"{value:.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def _axes(frame: Frame, *, unit: str) -> list[str]:
    parts = [_text(4, TOP - 14, unit)]
    for v in (0.0, frame.y_max / 2, frame.y_max):
        y = frame.y(v)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" class="qh-grid"/>')
        parts.append(_text(LEFT - 6, y + 4, _number(v), anchor="end"))
    return parts


def _legend(items: Sequence[tuple[str, str]]) -> list[str]:
    return [
        _swatch(LEFT + 150 + i * 130, cls) + _text(LEFT + 150 + i * 130 + 20, 15, label)
        for i, (cls, label) in enumerate(items)
    ]


def _swatch(x: float, cls: str) -> str:
    # Lines are keyed by a short stroke in their own style, bars by a filled block.
    if cls.startswith("qh-line"):
        return f'<line x1="{x:.1f}" x2="{x + 16:.1f}" y1="11" y2="11" class="{cls}"/>'
    return _rect(x, 8, 12, 6, cls)


def _polyline(points: Iterable[tuple[float, float]], cls: str) -> str:
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    return f'<polyline points="{coords}" class="{cls}" fill="none"/>'


def requests_chart(*, points: Sequence[tuple[float, int]], limit: int) -> SafeString:
    """A run seen from the provider: requests in its last 60 s at each (seconds into the run,
    requests) point, against the requests/min limit (the demo report's first chart)."""
    frame = Frame(height=240, y_max=max([1.0, limit * 1.1, *(n * 1.1 for _, n in points)]))
    title = "LLM requests per minute against the limit"
    parts = _axes(frame, unit="requests in the last 60 s")
    end = max([1.0, *(t for t, _ in points)])

    def x(t: float) -> float:
        return LEFT + frame.plot_w * min(1.0, max(0.0, t / end))

    if points:
        parts.append(_polyline([(x(t), frame.y(n)) for t, n in points], "qh-line-rate"))
    else:
        parts.append(_text(LEFT + 12, TOP + 40, "No samples."))
    parts.append(_polyline([(x(0), frame.y(limit)), (x(end), frame.y(limit))], "qh-line-limit"))
    parts += _legend([("qh-line-rate", "requests, last 60 s"), ("qh-line-limit", f"limit {limit}/min")])
    for t, anchor in ((0.0, "start"), (end / 2, "middle"), (end, "end")):
        parts.append(_text(x(t), frame.height - 8, f"{t:.0f} s", anchor=anchor))
    return _svg(chart_id="chart-requests-run", title=title, height=frame.height, parts=parts)


def budget_chart(*, points: Sequence[BudgetPoint], now: datetime, tokens: bool = False) -> SafeString:
    """Use per minute over the last hour (bars) against the configured limit, the adapted
    (effective) limit and the dispatch refill rate (lines)."""
    unit, chart_id = (
        ("tokens / min", "chart-budget-tokens") if tokens else ("requests / min", "chart-budget-requests")
    )
    # Per sample: (used, limit, effective limit, dispatch rate), in the chart's unit.
    series = [
        (p.at, (p.tokens, p.limit_tpm, p.effective_tpm, p.rate_tpm))
        if tokens
        else (p.at, (p.requests, p.limit_rpm, p.effective_rpm, p.rate_rpm))
        for p in points
    ]
    frame = Frame(height=240, y_max=max([1.0, *(max(values) * 1.1 for _, values in series)]))
    title = f"LLM {unit} over the last hour against the limit"
    parts = _axes(frame, unit=unit)
    if not series:
        parts.append(_text(LEFT + 12, TOP + 40, "No samples yet: the dispatcher records one a minute."))
        return _svg(chart_id=chart_id, title=title, height=frame.height, parts=parts)

    def x(at: datetime) -> float:
        return LEFT + frame.plot_w * min(1.0, max(0.0, (at - (now - HOUR)) / HOUR))

    bar_w = frame.plot_w / 60 - 1
    for at, (used, *_) in series:
        parts.append(
            _rect(x(at), frame.y(used), bar_w, frame.y(0) - frame.y(used), "qh-bar", f"{at:%H:%M} {used}")
        )
    for i, cls in ((1, "qh-line-limit"), (2, "qh-line-effective"), (3, "qh-line-rate")):
        # Each line runs on to "now" at its last value: a limit holds until the next sample.
        line = [(x(at), frame.y(values[i])) for at, values in series]
        if i == 1:  # the configured limit is a setting, true before the first sample as well
            line.insert(0, (x(now - HOUR), line[0][1]))
        parts.append(_polyline([*line, (x(now), line[-1][1])], cls))
    parts += _legend(
        [
            ("qh-bar", "used"),
            ("qh-line-limit", "limit"),
            ("qh-line-effective", "effective limit"),
            ("qh-line-rate", "dispatch rate"),
        ]
    )
    for minutes, label, anchor in ((60, "-60 min", "start"), (30, "-30 min", "middle"), (0, "now", "end")):
        parts.append(_text(x(now - timedelta(minutes=minutes)), frame.height - 8, label, anchor=anchor))
    return _svg(chart_id=chart_id, title=title, height=frame.height, parts=parts)


def owner_share_chart(*, owners: Sequence[OwnerShare], limit: int = 30) -> SafeString:
    """Horizontal bars per owner: emails sent and outreach dispatched in the last 24 h."""
    owners = sorted(owners, key=lambda o: (-o.sent_24h, -o.dispatched_24h, o.name))[:limit]
    row, label_w = 26, 180
    height = TOP + BOTTOM + row * max(1, len(owners))
    scale = (WIDTH - RIGHT - label_w - 90) / max([1, *(max(o.sent_24h, o.dispatched_24h) for o in owners)])
    parts = _legend([("qh-bar", "sent, 24 h"), ("qh-bar-alt", "dispatched, 24 h")])
    for i, o in enumerate(owners):
        y = TOP + i * row
        share = f" ({o.share_sent_24h:.0%})" if o.share_sent_24h is not None else ""
        parts.append(
            f'<g class="qh-owner" data-owner-id="{o.owner_id}">'
            + _text(label_w - 6, y + 12, o.name[:28], anchor="end")
            + _rect(label_w, y + 2, o.sent_24h * scale, 9, "qh-bar", f"{o.name}: {o.sent_24h} sent")
            + _rect(
                label_w, y + 12, o.dispatched_24h * scale, 7, "qh-bar-alt", f"{o.dispatched_24h} dispatched"
            )
            + _text(
                label_w + max(o.sent_24h, o.dispatched_24h) * scale + 6,
                y + 14,
                f"{o.sent_24h}{share} / {o.dispatched_24h}",
            )
            + "</g>"
        )
    if not owners:
        parts.append(_text(LEFT, TOP + 14, "No owners yet."))
    return _svg(chart_id="chart-owner-share", title="Share per owner, last 24 h", height=height, parts=parts)


def latency_chart(*, latency: dict[str, Quantiles]) -> SafeString:
    """p50 and p95 latency per tier (bars), in minutes when any p95 is over two minutes."""
    worst = max([0.0, *(q.p95_s or 0.0 for q in latency.values())])
    divisor, unit = (60.0, "minutes") if worst > 120 else (1.0, "seconds")
    frame = Frame(height=220, y_max=max(1.0, worst / divisor * 1.1))
    slot = frame.plot_w / max(1, len(latency))
    parts = _axes(frame, unit=unit) + _legend([("qh-bar", "p50"), ("qh-bar-alt", "p95")])
    for i, (tier, q) in enumerate(latency.items()):
        x0 = LEFT + i * slot + slot * 0.2
        for j, (name, value, cls) in enumerate((("p50", q.p50_s, "qh-bar"), ("p95", q.p95_s, "qh-bar-alt"))):
            v = (value or 0.0) / divisor
            tip = f"{tier} {name}: " + ("no data" if value is None else f"{v:.1f} {unit}")
            parts.append(
                _rect(x0 + j * slot * 0.3, frame.y(v), slot * 0.28, frame.y(0) - frame.y(v), cls, tip)
            )
        parts.append(_text(x0 + slot * 0.29, frame.height - 8, f"{tier} (n={q.count})", anchor="middle"))
    return _svg(
        chart_id="chart-latency",
        title="Latency per tier (due to completed)",
        height=frame.height,
        parts=parts,
    )


def panels_chart(
    *, chart_id: str, title: str, labels: Sequence[str], panels: Sequence[tuple[str, Sequence[float]]]
) -> SafeString:
    """Small bar panels side by side, one bar per label in each (bench/compare.py: one bar per
    arm for utilization, 429s, reply latency and fairness); each panel has its own scale."""
    height, gap = 220, 12
    panel_w = (WIDTH - gap * (len(panels) + 1)) / max(1, len(panels))
    parts = []
    for i, (name, values) in enumerate(panels):
        x0, top_value = gap + i * (panel_w + gap), max([0.0, *values])
        frame = Frame(height=height, y_max=top_value * 1.15 or 1.0)
        parts.append(_text(x0 + panel_w / 2, TOP - 12, name, anchor="middle"))
        bar_w = panel_w / max(1, len(values)) * 0.6
        for j, (label, value) in enumerate(zip(labels, values, strict=True)):
            x = x0 + panel_w / max(1, len(values)) * (j + 0.2)
            cls = "qh-bar" if j % 2 == 0 else "qh-bar-alt"
            parts.append(
                _rect(x, frame.y(value), bar_w, frame.y(0) - frame.y(value), cls, f"{label}: {value:g}")
            )
            parts.append(_text(x + bar_w / 2, frame.y(value) - 4, _number(value), anchor="middle"))
            parts.append(_text(x + bar_w / 2, height - 8, label, anchor="middle"))
    return _svg(chart_id=chart_id, title=title, height=height, parts=parts)


# The dashboard template's colours for a chart written as a file (no admin stylesheet around it).
_FILE_STYLE = (
    ".qh-chart{background:#fff;font-family:sans-serif}.qh-label{font-size:11px;fill:#555}"
    ".qh-grid{stroke:#ddd;stroke-width:1}.qh-bar{fill:#79aec8}.qh-bar-alt{fill:#417690}"
    ".qh-line-limit{stroke:#ba2121;stroke-width:2;stroke-dasharray:6 4;fill:none}"
    ".qh-line-effective{stroke:#e08e0b;stroke-width:2;fill:none}"
    ".qh-line-rate{stroke:#3c8d40;stroke-width:1.5;fill:none}"
)


def svg_document(chart: SafeString) -> str:
    """One chart as a standalone .svg file: the chart with its styles inside it."""
    opening, close, rest = str(chart).partition(">")  # the end of the <svg ...> tag
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{opening}{close}<style>{_FILE_STYLE}</style>{rest}\n'
