"""python manage.py queue_stats [--json] [--org NAME]: the queue-health figures of the admin
dashboard and /metrics. Unscoped for shell operators; --org gives that organization's figures
(its rows, owners and dead letters; the shared budget stays whole), as its members' dashboard does."""

from __future__ import annotations

import io
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console
from rich.table import Table

from backoffice.dashboard import duration, number, percent, seconds
from orchestrator.metrics.queue_health import QueueHealth, queue_health
from outreach.models import Organization


class Command(BaseCommand):
    help = (
        "Queue health: rows per state and tier, oldest ready age, latency, retries, provider 429s, "
        "LLM requests, dead letters, approvals, share per owner, deferred work, the LLM budget, "
        "active pauses, drafts rejected by reason and replies per triage class. "
        "--json prints one object (the keys of docs/architecture.md first, then the rest)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", dest="as_json", help="Print JSON (for scripts).")
        parser.add_argument(
            "--org",
            metavar="NAME",
            help="Only this organization's figures (rows, owners, dead letters); the shared budget stays whole.",
        )

    def handle(self, *args: Any, as_json: bool, org: str | None = None, **options: Any) -> None:
        health = queue_health(organization_ids=None if org is None else [_organization_id(org)])
        if as_json:
            self.stdout.write(json.dumps(health.as_json(), indent=2, sort_keys=False))
            return
        buffer = io.StringIO()  # rendered whole, then written once through Django's stdout
        console = Console(file=buffer, width=110, force_terminal=self.stdout.isatty())
        for table in _tables(health):
            console.print(table)
        self.stdout.write(buffer.getvalue(), ending="")


def _organization_id(name: str) -> int:
    found = Organization.objects.filter(name=name).values_list("pk", flat=True).first()
    if found is None:
        raise CommandError(f"--org: no organization named {name!r}")
    return found


def _tables(h: QueueHealth) -> list[Table]:
    return [
        _depth(h),
        _activity(h),
        _in_flight(h),
        _deployments(h),
        _owners(h),
        _failures(h),
        _held(h),
        _replies(h),
        _deliverability(h),
        _mailboxes(h),
    ]


def _mailboxes(h: QueueHealth) -> Table:
    """Each mailbox: today's sends against its cap and warm-up step, next send, rates (docs/email.md)."""
    table = Table(title="Mailboxes", title_justify="left")
    for column in (
        "mailbox",
        "owners",
        "sent today",
        "cap (step)",
        "next send",
        "bounces",
        "complaints",
        "state",
    ):
        table.add_column(column, justify="right" if column in ("sent today", "cap (step)") else "left")
    for m in h.mailboxes:
        table.add_row(
            m.address,
            m.owners,
            str(m.sent_today),
            f"{m.cap} ({m.ramp_cap})",
            "now" if m.next_send_at is None else f"{m.next_send_at:%H:%M:%S} UTC",
            percent(m.bounce_rate),
            percent(m.complaint_rate),
            "active" if m.active else f"paused: {m.paused_reason}" if m.paused_reason else "paused",
        )
    return table


def _deliverability(h: QueueHealth) -> Table:
    """Owners and sender domains with any hard bounce or complaint (docs/email.md)."""
    d = h.deliverability
    table = Table(title=f"Bounces and complaints, last {d.window_sends} sends", title_justify="left")
    for column in ("scope", "name", "sends", "bounced", "bounce rate", "complained", "complaint rate"):
        table.add_column(column, justify="left" if column in ("scope", "name") else "right")
    for r in [*d.owners, *d.domains]:
        table.add_row(
            r.scope,
            r.name,
            str(r.sends),
            str(r.bounced),
            percent(r.bounce_rate),
            str(r.complained),
            percent(r.complaint_rate),
        )
    return table


def _replies(h: QueueHealth) -> Table:
    table = Table(title=f"Replies by class, last {h.window_s / 3600:g} h", title_justify="left")
    for column in ("class", "received", "awaiting", "approved / rejected", "approval rate"):
        table.add_column(column, justify="left" if column == "class" else "right")
    for r in h.replies:
        table.add_row(
            r.reply_class,
            str(r.received),
            str(r.awaiting),
            f"{r.approved} / {r.rejected}",
            percent(r.approval_rate),
        )
    return table


def _deployments(h: QueueHealth) -> Table:
    table = Table(title="LLM deployments", title_justify="left")
    for column in ("deployment", "model", "limit rpm/tpm", "used 60 s", "headroom", "breaker"):
        table.add_column(column)
    for d in h.deployments:
        table.add_row(
            d.label,
            d.model,
            f"{d.limit_rpm}/{d.limit_tpm}",
            f"{number(d.used_requests)}/{number(d.used_tokens)}",
            f"{number(d.headroom_requests)}/{number(d.headroom_tokens)}",
            d.breaker + (f": {d.reason}" if d.reason else ""),
        )
    return table


def _depth(h: QueueHealth) -> Table:
    d = h.depth
    table = Table(title=f"Queue at {h.generated_at:%Y-%m-%d %H:%M:%S} UTC", title_justify="left")
    table.add_column("state")
    for tier in d.tiers:
        table.add_column(tier, justify="right")
    table.add_column("all", justify="right")
    for state, n in d.states.items():
        table.add_row(state, *(str(d.tiers[t].get(state, "")) for t in d.tiers), str(n))
    table.add_row(
        "ready now", *(str(d.ready_by_tier[t]) for t in d.tiers), str(sum(d.ready_by_tier.values()))
    )
    table.add_row(
        "oldest ready",
        *(duration(d.oldest_ready_age_s_by_tier[t]) for t in d.tiers),
        duration(d.oldest_ready_age_s),
    )
    return table


def _activity(h: QueueHealth) -> Table:
    a, b = h.activity, h.budget
    table = Table(title=f"Last {h.window_s / 3600:g} h", title_justify="left", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("completed / sent / dead", f"{a.completed} / {a.sent} / {a.dead}"),
        ("retries (rate)", f"{a.retries} ({percent(h.retry_rate)})"),
        ("dead-letter rate", percent(h.dead_letter_rate)),
        ("provider 429s", str(a.provider_429s)),
        ("LLM requests / drafts", f"{a.llm_requests} / {a.generated}"),
        (
            "tokens, cost per draft",
            f"{number(h.tokens_per_completed)}, {number(h.cost_per_completed, places=4)}",
        ),
        ("approved / rejected (rate)", f"{a.approved} / {a.rejected} ({percent(h.approval_rate)})"),
        (
            "time to approval p50 / p95",
            f"{duration(a.time_to_approval.p50_s)} / {duration(a.time_to_approval.p95_s)}",
        ),
        *(
            (f"latency {t} p50 / p95 (n)", f"{duration(q.p50_s)} / {duration(q.p95_s)} ({q.count})")
            for t, q in a.latency.items()
        ),
        *(
            (f"success {k}", f"{percent(o.rate)} ({o.completed} ok, {o.dead} dead)")
            for k, o in a.success_by_kind.items()
        ),
        (
            "LLM now: used / effective / limit rpm",
            f"{b.requests_in_window} / {b.effective_rpm} / {b.limit_rpm}"
            if b.redis == "ok"
            else "Redis unreachable",
        ),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table


def _in_flight(h: QueueHealth) -> Table:
    f = h.in_flight
    table = Table(title="LLM work in flight (Little's law)", title_justify="left", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("in flight / target / cap", f"{f.in_flight} / {f.target} / {f.cap}")
    table.add_row("budget rate x job latency", f"{f.rate_per_s:.2f}/s x {seconds(f.job_latency_s)}")
    for step, q in f.latency.items():
        table.add_row(f"call {step} p50 / p95 (n)", f"{seconds(q.p50_s)} / {seconds(q.p95_s)} ({q.count})")
    return table


def _owners(h: QueueHealth) -> Table:
    table = Table(title="Share per owner", title_justify="left")
    columns = (
        "owner",
        "days",
        "today sent / committed / limit",
        "sent 1 h",
        "sent 24 h",
        "share",
        "dispatched 1 h",
        "dispatched 24 h",
    )
    for column in columns:
        table.add_column(column, justify="left" if column in ("owner", "days") else "right")
    for o in h.owners:
        table.add_row(
            o.name,
            o.working_days,
            f"{o.sent_today} / {o.committed_today} / {o.daily_limit}",
            str(o.sent_1h),
            str(o.sent_24h),
            percent(o.share_sent_24h),
            str(o.dispatched_1h),
            str(o.dispatched_24h),
        )
    return table


def _failures(h: QueueHealth) -> Table:
    table = Table(title=f"Dead letters ({h.dead_letters}) and deferred work", title_justify="left")
    table.add_column("class / reason")
    table.add_column("open / rows", justify="right")
    table.add_column("newest open: dead letter, outreach: reason")
    for f in h.failures:
        samples = "\n".join(f"#{s.dead_letter_id}, {s.outreach_id}: {s.reason[:80]}" for s in f.samples)
        table.add_row(f.failure_class, f"{f.open} / {f.total}", samples)
    for r in h.deferred.reasons:
        table.add_row(f"deferred: {r.reason}", str(r.rows), f"{r.owners} owner(s)")
    return table


def _held(h: QueueHealth) -> Table:
    table = Table(title=f"Paused ({len(h.pauses)} active) and rejected by reason", title_justify="left")
    for column in ("pause / rejection reason", "by / drafts", "since", "reason", "source"):
        table.add_column(column)
    for p in h.pauses:
        since = f"{p.created_at:%Y-%m-%d %H:%M} UTC"
        table.add_row(f"#{p.pause_id} {p.scope}", p.created_by or "automatic", since, p.reason, p.source)
    for r in h.rejections:
        table.add_row(f"rejected: {r.reason or '(no reason given)'}", str(r.drafts), "", "", "")
    return table
