"""Soak: push N outreach (default 20,000) through the whole stack and check that none is lost,
none is sent twice, and the dispatcher's cycle time and every process's memory stay flat.

    .venv/bin/python bench/soak.py [--count 20000] [--rpm 3000] [--median-ms 3000] [--timeout-s 3600]
    .venv/bin/python bench/soak.py --count 2000          # a quick check
    .venv/bin/python bench/soak.py --smoke               # 100 outreach, seconds (CI)

The stack is production's: the worker lines of the root Procfile (orchestrator, generation,
reply, send, dead_letter, beat) started exactly as written, DEBUG off, every setting the
product's default but the provider's limits (`--set NAME=VALUE` overrides one), as
bench/latency.py runs them; `llm_sim` in its own process (strict 60 s window, lognormal latency,
median --median-ms and sigma --sigma, --fail-rate of admitted calls answered 5xx), an SMTP sink
in this process that counts every message by Message-ID, a scratch PostgreSQL database
`outreach_bench_soak` (dropped and created) and a private redis-server. The key's limit sets the
pace: three calls an outreach, so 3,000 requests/min finish about 1,000 outreach a minute (the
Procfile's 200 generation threads carry about 3,500 calls a minute at a 3 s median). Most owners
are autonomous; some need review: this loop approves the drafts of all but one of them (the
approved-send path), the last one's drafts stay AWAITING_APPROVAL. A few "poison" leads make the
simulator fail on purpose (a draft that fails the policy twice, a 400, a 500 on every try), so
the dead-letter path runs under load too, at the product's retry schedule.

Every ~10 s it samples the dispatcher's cycle time (the orchestrator's JSON "dispatch cycle" log
lines carry `ms`), the RSS and CPU of every Procfile line's process tree (/proc), and the row
counts of the tables retention prunes (orchestrator.controls.retention.table_sizes). Beat runs
the prune (orchestrator.prune) as in production; to see it keep the tables flat within a run,
set short ages, e.g. --set RETENTION_EVENTS_DAYS=0.001 --set METRICS_WINDOW_S=60 --set
RETENTION_PRUNE_INTERVAL_S=20. At the end it checks the invariants, prints a table, writes
var/bench/soak.json and exits 1 if any failed. Flatness compares the first and the last tenth
of the run (issue 30: within 10%).

--smoke: 100 outreach of 4 owners (2 review-required), one poison lead of each kind, 200 ms
calls, backoff base 0.2 s, a sample every 2 s, on its own scratch database and redis-server: the
same invariants (none lost, none sent twice, every DEAD with a reason), but not the flatness
of memory and cycle time, which a run of seconds cannot show.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.stack import (
    SMOKE_HELP,
    bench_lead,
    database_for,
    llm_sim_argv,
    out_dir,
    private_redis_django,
    process_trees,
    production_env,
    smoke_stores,
    smoke_verdict,
)
from devtools.smtp_sink import SMTPSink, normalise_message_id
from orchestrator.figures import per_minute, percentile, ratio, retry_rate

DB_NAME = "outreach_bench_soak"
PROCESSES = ("orchestrator", "generation", "reply", "send", "dead_letter", "beat")  # the Procfile's; no web
FLAT = 1.10  # the last tenth's RSS median and cycle p50 at most 10% above the first's (issue 30)
CYCLE_LOGGER, CYCLE_MESSAGE = "orchestrator.dispatch.cycle", "dispatch cycle"  # config.logging's JSON lines
POISON = ("SIM:POLICY_FAIL", "SIM:FAIL_400", "SIM:FAIL_500")  # devtools.llm_sim markers


# --- sampling: dispatcher cycle times and RSS ----------------------------------------------------


@dataclass
class Sample:
    t_s: float  # seconds since the stack started
    rss_kb: dict[str, int]  # process name -> RSS of it and all its descendants
    children: dict[str, int]  # process name -> how many descendants
    cpu_s: dict[str, float]  # process name -> CPU seconds used so far by it and its descendants
    states: dict[str, int]
    tables: dict[str, int] = field(default_factory=dict)  # rows of the tables retention bounds


@dataclass
class Figures:
    count: int
    seconds: float = 0.0
    finished: bool = False
    states: dict[str, int] = field(default_factory=dict)
    requeued: dict[str, int] = field(default_factory=dict)  # back to the queue, by error class
    retries: int = 0  # transient retries (orchestrator.figures.retry_rate)
    completed: int = 0
    retry_rate: float | None = None
    dead_letters: dict[str, int] = field(default_factory=dict)
    dead_without_reason: int = 0
    messages: int = 0
    unique_message_ids: int = 0
    duplicates: int = 0
    sent_missing_in_sink: int = 0
    sent_received_twice: int = 0
    sink_unknown_message_ids: int = 0
    cycles: int = 0
    cycle_ms_first: dict[str, float | None] = field(default_factory=dict)
    cycle_ms_last: dict[str, float | None] = field(default_factory=dict)
    rss_mb_first: dict[str, float] = field(default_factory=dict)
    rss_mb_last: dict[str, float] = field(default_factory=dict)
    rss_mb_peak: dict[str, float] = field(default_factory=dict)
    cpu_s: dict[str, float] = field(default_factory=dict)
    table_rows_first: dict[str, int] = field(default_factory=dict)
    table_rows_last: dict[str, int] = field(default_factory=dict)
    table_rows_peak: dict[str, int] = field(default_factory=dict)
    sim: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)


def log_dir() -> Path:
    return out_dir() / "soak-logs"


def cycle_times(log_file: Path) -> list[tuple[float, float]]:
    """(unix time, ms) of every dispatch cycle the orchestrator logged (its JSON lines)."""
    found = []
    with log_file.open(errors="replace") as lines:
        for line in lines:
            if CYCLE_MESSAGE not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line Celery printed itself
            if record.get("logger") == CYCLE_LOGGER and record.get("message") == CYCLE_MESSAGE:
                found.append((datetime.fromisoformat(record["ts"]).timestamp(), float(record["ms"])))
    return found


# --- the stack ------------------------------------------------------------------------------------


def environment(*, sim_port: int, smtp_port: int, redis_url: str, args: argparse.Namespace) -> dict[str, str]:
    """The Procfile lines' environment: production's (bench.stack.production_env), the bench's
    stores, the simulator's limits, and --set."""
    from devtools.processes import stack_env

    return stack_env(
        llm_base_url=f"http://127.0.0.1:{sim_port}/v1",
        smtp_port=smtp_port,
        DATABASE_URL=os.environ["DATABASE_URL"],
        REDIS_URL=redis_url,
        LLM_RPM=str(args.rpm),
        LLM_TPM=str(args.tpm),
        **production_env(**dict(setting.split("=", 1) for setting in args.set)),
    )


def sim_command(*, args: argparse.Namespace, port: int) -> list[str]:
    return llm_sim_argv(
        port=port,
        rpm=args.rpm,
        tpm=args.tpm,
        mode="window",
        latency_median_ms=args.median_ms,
        latency_sigma=args.sigma,
        fail_rate=args.fail_rate,
        seed=args.seed,
        log_every=60,
    )


@dataclass(frozen=True)
class Seeded:
    ids: range | list[int]
    attended: list[int]  # review-required owners whose drafts this loop approves
    unattended: list[int]  # review-required owners whose drafts stay awaiting approval
    poison: dict[str, int]


def seed(*, count: int, owners: int, review_owners: int, poison_per_kind: int) -> Seeded:
    """Owners, leads and one queued intro per lead, in bulk. Poison leads carry a simulator marker."""
    from datetime import time as dtime

    from django.utils import timezone

    from outreach.idempotency import intro_key
    from outreach.models import Lead, Outreach, State
    from outreach.services.owners import OwnerSpec, owner_upsert

    made = [
        owner_upsert(
            spec=OwnerSpec(
                f"soak owner {o}",
                "agent" if o >= review_owners else "human",
                1_000_000,
                dtime(0),
                dtime(0),
                "UTC",
                working_days="1234567",
                review_required=o < review_owners,
                organization="Soak",
            )
        )[0]
        for o in range(owners)
    ]
    markers = [m for m in POISON for _ in range(poison_per_kind)]
    # Poison spread evenly over the run (every step-th lead), not bunched at the start.
    step = max(1, count // max(1, len(markers)))
    now, ids = timezone.now(), []
    for start in range(0, count, 2000):
        leads = Lead.objects.bulk_create(
            bench_lead(
                owner=made[i % owners], n=i, domain="soak.example", first_name=_first_name(i, markers, step)
            )
            for i in range(start, min(count, start + 2000))
        )
        rows = Outreach.objects.bulk_create(
            Outreach(
                lead=lead,
                owner_id=lead.owner_id,
                kind="intro",
                tier=2,
                state=State.QUEUED,
                not_before=now,
                idempotency_key=intro_key(lead_id=lead.pk),
                state_changed_at=now,
            )
            for lead in leads
        )
        ids += [row.pk for row in rows]
    review = [o.pk for o in made[:review_owners]]
    return Seeded(ids=ids, attended=review[:-1], unattended=review[-1:], poison=dict(Counter(markers)))


def _first_name(i: int, markers: list[str], step: int) -> str:
    slot, rest = divmod(i, step)
    return markers[slot] if rest == step // 2 and slot < len(markers) else "Pat"


# --- the loop ------------------------------------------------------------------------------------

UNFINISHED = ("queued", "dispatched", "generating", "approved", "sending")


def state_counts(ids: list[int]) -> dict[str, int]:
    from django.db.models import Count

    from outreach.models import Outreach

    rows = Outreach.objects.filter(pk__gte=min(ids), pk__lte=max(ids)).values("state").annotate(n=Count("id"))
    return {row["state"]: row["n"] for row in rows}


def done(states: dict[str, int], *, attended_waiting: int) -> bool:
    return not any(states.get(s) for s in UNFINISHED) and attended_waiting == 0


def run(args: argparse.Namespace) -> Figures:
    from bench.latency import http_json, wait_healthy
    from devtools.processes import ProcessGroup, free_port
    from devtools.procfile import procfile_argv

    with private_redis_django(db_name=DB_NAME) as redis_url:
        from django.core.management import call_command

        database_for(name=DB_NAME)  # dropped and created (or BENCH_DATABASE_URL, kept)
        call_command("migrate", verbosity=0)
        # This process seeds, approves and reads: its own INFO lines (every approval, every SMTP
        # command of the sink) would bury the progress.
        logging.getLogger("mail.log").setLevel(logging.WARNING)
        sink, sim_port = SMTPSink(keep_messages=False).start(), free_port()  # counts per Message-ID
        env = environment(sim_port=sim_port, smtp_port=sink.port, redis_url=redis_url, args=args)
        for old in log_dir().glob("*.log"):
            old.unlink()
        provider, workers = ProcessGroup(log_dir=log_dir(), env=env), ProcessGroup(log_dir=log_dir(), env=env)
        try:
            provider.start("llm_sim", sim_command(args=args, port=sim_port))
            wait_healthy(f"http://127.0.0.1:{sim_port}/health")
            return _run_stack(
                args=args,
                workers=workers,
                commands={name: procfile_argv(name) for name in PROCESSES},
                stats=lambda: http_json(f"http://127.0.0.1:{sim_port}/stats"),
                handler=sink,
            )
        finally:
            workers.stop()
            provider.stop()
            sink.stop()


def _run_stack(
    *,
    args: argparse.Namespace,
    workers: Any,
    commands: dict[str, list[str]],
    stats: Any,
    handler: SMTPSink,
) -> Figures:
    from django.contrib.auth.models import User

    print(f"seeding {args.count:,} outreach ...", flush=True)
    seeded = seed(
        count=args.count,
        owners=args.owners,
        review_owners=args.review_owners,
        poison_per_kind=args.poison_per_kind,
    )
    reviewer = User.objects.create_user("soak-reviewer")
    figures = Figures(count=args.count)
    for name in PROCESSES:
        workers.start(name, commands[name])
    started, started_wall = time.monotonic(), time.time()
    samples: list[Sample] = []
    figures.finished = _loop(
        args=args,
        workers=workers,
        seeded=seeded,
        reviewer=reviewer,
        started=started,
        samples=samples,
        handler=handler,
    )
    figures.seconds = time.monotonic() - started
    time.sleep(args.settle_s)  # a late duplicate (a redelivered task) would land now
    workers.stop()
    _collect(
        figures=figures,
        seeded=seeded,
        samples=samples,
        handler=handler,
        sim_stats=stats(),
        started_wall=started_wall,
        smoke=args.smoke,
    )
    return figures


def _loop(
    *,
    args: argparse.Namespace,
    workers: Any,
    seeded: Seeded,
    reviewer: Any,
    started: float,
    samples: list[Sample],
    handler: SMTPSink,
) -> bool:
    from nurture.review import drafts_approve
    from orchestrator.controls.retention import table_sizes
    from outreach.models import Outreach, State

    ids = list(seeded.ids)
    procs = workers.procs
    next_sample = started
    while (elapsed := time.monotonic() - started) < args.timeout_s:
        if dead := workers.dead():
            raise RuntimeError(f"process(es) died: {', '.join(dead)}; see {log_dir()}")
        drafts_approve(
            drafts=Outreach.objects.filter(state=State.AWAITING_APPROVAL, owner_id__in=seeded.attended)[:500],
            by=reviewer,
        )
        if time.monotonic() >= next_sample:
            next_sample += args.sample_every_s
            states = state_counts(ids)
            sample = Sample(
                t_s=round(elapsed, 1), rss_kb={}, children={}, cpu_s={}, states=states, tables=table_sizes()
            )
            for name in PROCESSES:
                tree = process_trees({name: procs[name].pid})[name]
                sample.rss_kb[name], sample.children[name], sample.cpu_s[name] = (
                    tree.rss_kb,
                    tree.descendants,
                    tree.cpu_s,
                )
            samples.append(sample)
            messages, _ = handler.snapshot()
            finished = sum(states.get(s, 0) for s in ("sent", "dead", "awaiting_approval"))
            print(
                f"  {elapsed:6.0f}s  finished {finished:>6,}/{args.count:,}  sent {states.get('sent', 0):>6,}  "
                f"smtp {messages:>6,}  queued {states.get('queued', 0):>6,}  in flight "
                f"{sum(states.get(s, 0) for s in UNFINISHED[1:]):>4}  dead {states.get('dead', 0):>3}  "
                f"rss MB " + " ".join(f"{n[:4]}={kb / 1024:.0f}" for n, kb in sample.rss_kb.items()),
                flush=True,
            )
            waiting = Outreach.objects.filter(
                state=State.AWAITING_APPROVAL, owner_id__in=seeded.attended
            ).count()
            if done(states, attended_waiting=waiting):
                return True
        time.sleep(1.0)
    return False


# --- results ---------------------------------------------------------------------------------------


def _collect(
    *,
    figures: Figures,
    seeded: Seeded,
    samples: list[Sample],
    handler: SMTPSink,
    sim_stats: dict[str, Any],
    started_wall: float,
    smoke: bool,
) -> None:
    from django.db.models import Count, Exists, OuterRef, Q

    from orchestrator.metrics.activity import recent_activity
    from orchestrator.models import DeadLetter
    from outreach.models import Outreach, OutreachEvent, State

    ids = list(seeded.ids)
    mine = Outreach.objects.filter(pk__gte=min(ids), pk__lte=max(ids))
    figures.states = state_counts(ids)
    events = OutreachEvent.objects.filter(
        outreach_id__gte=min(ids),
        outreach_id__lte=max(ids),
        from_state__in=[State.GENERATING, State.SENDING],
        to_state__in=[State.QUEUED, State.APPROVED],
    )
    figures.requeued = {
        (row["error_class"] or "paced"): row["n"]
        for row in events.values("error_class").annotate(n=Count("id"))
    }
    # The dashboard's selector (the scratch database holds only this run).
    activity = recent_activity(since=datetime.fromtimestamp(started_wall, tz=UTC))
    figures.retries, figures.completed = activity.retries, activity.completed
    figures.retry_rate = retry_rate(retries=activity.retries, completed=activity.completed)
    letters = DeadLetter.objects.filter(outreach__in=mine)
    figures.dead_letters = {
        row["failure_class"]: row["n"] for row in letters.values("failure_class").annotate(n=Count("id"))
    }
    dead = mine.filter(state=State.DEAD)
    with_reason = DeadLetter.objects.filter(outreach=OuterRef("pk")).exclude(reason="")
    figures.dead_without_reason = dead.filter(~Exists(with_reason)).count()
    _check_sink(figures=figures, mine=mine, handler=handler)
    _cycle_figures(figures=figures, started_wall=started_wall)
    _rss_figures(figures=figures, samples=samples)
    _table_figures(figures=figures, samples=samples)
    stats = sim_stats
    figures.sim = {
        k: stats[k]
        for k in ("requests", "admitted", "rejected_429", "injected_5xx", "marker_errors", "completed")
    }
    figures.sim["peak_window_requests"] = stats["peak_window"]["requests"]
    figures.samples = [asdict(s) for s in samples]
    _judge(
        figures=figures,
        seeded=seeded,
        unexpected=mine.filter(~Q(state__in=["sent", "dead", "awaiting_approval"])),
        flatness=not smoke,
    )


def _check_sink(*, figures: Figures, mine: Any, handler: SMTPSink) -> None:
    from outreach.models import State

    figures.messages, received = handler.snapshot()
    figures.unique_message_ids = len(received)
    figures.duplicates = figures.messages - figures.unique_message_ids
    sent_ids = {
        normalise_message_id(m) for m in mine.filter(state=State.SENT).values_list("message_id", flat=True)
    }
    figures.sent_missing_in_sink = sum(1 for m in sent_ids if received.get(m, 0) == 0)
    figures.sent_received_twice = sum(1 for m in sent_ids if received.get(m, 0) > 1)
    figures.sink_unknown_message_ids = len(set(received) - sent_ids)


def _tenths(
    values: list[tuple[float, float]], *, start: float, end: float
) -> tuple[list[float], list[float]]:
    """The values of the first and of the last tenth of [start, end] (issue 30's flatness)."""
    tenth = (end - start) / 10
    first = [v for t, v in values if start <= t < start + tenth]
    last = [v for t, v in values if end - tenth <= t <= end]
    return first, last


def _cycle_figures(*, figures: Figures, started_wall: float) -> None:
    cycles = cycle_times(log_dir() / "orchestrator.log")
    figures.cycles = len(cycles)
    first, last = _tenths(cycles, start=started_wall, end=started_wall + figures.seconds)
    figures.cycle_ms_first = {
        "p50": percentile(values=first, fraction=0.5),
        "p95": percentile(values=first, fraction=0.95),
        "n": len(first),
    }
    figures.cycle_ms_last = {
        "p50": percentile(values=last, fraction=0.5),
        "p95": percentile(values=last, fraction=0.95),
        "n": len(last),
    }


def _rss_figures(*, figures: Figures, samples: list[Sample]) -> None:
    # Skip the first 30 s (imports, pool start-up, first connections): "flat" is about the steady run.
    steady = [s for s in samples if s.t_s >= 30] or samples
    for name in PROCESSES:
        series = [(s.t_s, s.rss_kb[name] / 1024) for s in steady]
        if not series:
            continue
        first, last = _tenths(series, start=series[0][0], end=series[-1][0])
        figures.rss_mb_first[name] = round(percentile(values=first or [series[0][1]], fraction=0.5) or 0.0, 1)
        figures.rss_mb_last[name] = round(percentile(values=last or [series[-1][1]], fraction=0.5) or 0.0, 1)
        figures.rss_mb_peak[name] = round(max(v for _, v in series), 1)
        figures.cpu_s[name] = round(samples[-1].cpu_s[name], 1)


def _table_figures(*, figures: Figures, samples: list[Sample]) -> None:
    # Reported, not judged: the rows stay flat only when the retention ages (RETENTION_*, set in
    # the environment) are shorter than the run, e.g. RETENTION_EVENTS_DAYS=0.001 (86 s) with
    # METRICS_WINDOW_S=60 and RETENTION_PRUNE_INTERVAL_S=20.
    if not samples:
        return
    figures.table_rows_first, figures.table_rows_last = dict(samples[0].tables), dict(samples[-1].tables)
    figures.table_rows_peak = {
        name: max(s.tables.get(name, 0) for s in samples) for name in samples[0].tables
    }


def _judge(*, figures: Figures, seeded: Seeded, unexpected: Any, flatness: bool) -> None:
    p = figures.problems
    total = sum(figures.states.values())
    if not figures.finished:
        p.append(f"not finished within the timeout: {dict(figures.states)}")
    if total != figures.count:
        p.append(f"lost: {figures.count - total} outreach not found by state")
    if n := unexpected.count():
        p.append(f"{n} outreach ended outside SENT / AWAITING_APPROVAL / DEAD")
    if figures.dead_without_reason:
        p.append(f"{figures.dead_without_reason} DEAD outreach without a dead letter and reason")
    if figures.duplicates or figures.sent_received_twice:
        p.append(f"sent twice: {figures.duplicates} duplicate message(s)")
    if figures.sent_missing_in_sink:
        p.append(f"{figures.sent_missing_in_sink} SENT outreach never reached the SMTP sink")
    if figures.sink_unknown_message_ids:
        p.append(f"{figures.sink_unknown_message_ids} message(s) in the sink for outreach not recorded SENT")
    if (
        figures.states.get("sent", 0)
        + figures.states.get("awaiting_approval", 0)
        + figures.states.get("dead", 0)
        != figures.count
    ):
        p.append("states do not add up to the count")
    if not flatness:  # a smoke run: seconds, no steady state to be flat in
        return
    for name, first in figures.rss_mb_first.items():
        if figures.rss_mb_last[name] > FLAT * first:
            p.append(
                f"memory grew: {name} {first} -> {figures.rss_mb_last[name]} MB (median, first -> last tenth)"
            )
    first_p50, last_p50 = figures.cycle_ms_first.get("p50"), figures.cycle_ms_last.get("p50")
    if first_p50 is not None and last_p50 is not None and last_p50 > FLAT * first_p50:
        p.append(f"dispatcher slowed: cycle p50 {first_p50:.0f} -> {last_p50:.0f} ms (first -> last tenth)")


def report(figures: Figures, args: argparse.Namespace) -> None:
    f = figures
    rate = per_minute(count=f.states.get("sent", 0), seconds=f.seconds) or 0.0
    finished = sum(f.states.get(s, 0) for s in ("sent", "awaiting_approval", "dead"))
    rows: list[tuple[str, str]] = [
        (
            "outreach",
            f"{f.count:,} ({args.owners} owners, {args.review_owners} review-required; "
            f"{args.poison_per_kind} poison leads per kind x {len(POISON)})",
        ),
        (
            "provider",
            f"llm_sim window {args.rpm} rpm / {args.tpm:,} tpm, latency median {args.median_ms:g} ms "
            f"sigma {args.sigma:g}, {100 * args.fail_rate:g}% 5xx",
        ),
        ("total time", f"{f.seconds:.0f} s ({'finished' if f.finished else 'TIMED OUT'})"),
        (
            "throughput",
            f"{per_minute(count=finished, seconds=f.seconds) or 0:,.0f} finished/min, {rate:,.0f} sent/min",
        ),
        (
            "states",
            ", ".join(f"{k} {v:,}" for k, v in sorted(f.states.items()))
            + f" (sum {sum(f.states.values()):,})",
        ),
        ("re-queued (by class)", ", ".join(f"{k} {v:,}" for k, v in sorted(f.requeued.items())) or "0"),
        ("transient retries per completed", f"{_number(f.retry_rate, 4)} ({f.retries:,}/{f.completed:,})"),
        ("dead letters by class", ", ".join(f"{k} {v}" for k, v in sorted(f.dead_letters.items())) or "0"),
        ("DEAD without a reason", str(f.dead_without_reason)),
        (
            "provider calls",
            f"{f.sim['requests']:,} ({f.sim['injected_5xx']:,} injected 5xx, "
            f"{f.sim['marker_errors']} poison errors, {f.sim['rejected_429']} 429s; "
            f"peak {f.sim['peak_window_requests']:,}/{args.rpm} in a 60 s window)",
        ),
        ("SMTP sink", f"{f.messages:,} messages, {f.unique_message_ids:,} unique Message-IDs"),
        (
            "duplicates (sent twice)",
            f"{f.duplicates} (SENT received twice: {f.sent_received_twice}; SENT not "
            f"received: {f.sent_missing_in_sink}; received, not SENT: "
            f"{f.sink_unknown_message_ids})",
        ),
        ("dispatch cycles", f"{f.cycles:,}"),
        (
            "cycle ms p50 / p95, first tenth",
            f"{_number(f.cycle_ms_first['p50'])} / "
            f"{_number(f.cycle_ms_first['p95'])} (n={f.cycle_ms_first['n']:.0f})",
        ),
        (
            "cycle ms p50 / p95, last tenth",
            f"{_number(f.cycle_ms_last['p50'])} / "
            f"{_number(f.cycle_ms_last['p95'])} (n={f.cycle_ms_last['n']:.0f})",
        ),
    ]
    cpu_total = sum(f.cpu_s.values())
    rows.append(
        (
            "CPU s used (all processes)",
            f"{cpu_total:,.0f} ({_number(ratio(1000 * cpu_total, finished), 0)} ms per "
            "outreach; " + ", ".join(f"{n} {s:,.0f}" for n, s in f.cpu_s.items()) + ")",
        )
    )
    for name in PROCESSES:
        rows.append(
            (
                f"RSS MB {name} (+pool), first -> last tenth (peak)",
                f"{f.rss_mb_first.get(name, 0):.0f} -> {f.rss_mb_last.get(name, 0):.0f} "
                f"({f.rss_mb_peak.get(name, 0):.0f})",
            )
        )
    for name, first in f.table_rows_first.items():
        rows.append(
            (
                f"rows {name}, first -> last sample (peak)",
                f"{first:,} -> {f.table_rows_last.get(name, 0):,} ({f.table_rows_peak.get(name, 0):,})",
            )
        )
    width = max(len(label) for label, _ in rows)
    print()
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}")
    print(
        "\nresult: "
        + (
            "PASS: none lost, none sent twice"
            + (" (flatness not judged: a smoke run)" if args.smoke else ", cycle time and memory flat")
            if not f.problems
            else "FAIL: " + "; ".join(f.problems)
        )
    )
    out_dir().mkdir(parents=True, exist_ok=True)
    (out_dir() / "soak.json").write_text(json.dumps(asdict(f), indent=2, default=str))
    print(f"wrote {out_dir() / 'soak.json'}; process logs in {log_dir()}")


def _number(value: float | None, places: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{places}f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=20_000, help="Outreach to push through (default 20000).")
    parser.add_argument("--owners", type=int, default=20)
    parser.add_argument("--review-owners", type=int, default=4, help="Of --owners, how many need review.")
    parser.add_argument("--poison-per-kind", type=int, default=None, help="Default: count/2000 per kind.")
    parser.add_argument("--rpm", type=int, default=3000, help="The key's requests/min (default 3000).")
    parser.add_argument("--tpm", type=int, default=10_000_000)
    parser.add_argument(
        "--median-ms", type=float, default=3000.0, help="Provider latency median (default 3000)."
    )
    parser.add_argument("--sigma", type=float, default=0.5, help="Lognormal sigma (default 0.5).")
    parser.add_argument("--fail-rate", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="A setting for the workers."
    )
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--sample-every-s", type=float, default=10.0)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.count, args.owners, args.review_owners, args.poison_per_kind = 100, 4, 2, 1
        args.rpm, args.median_ms, args.sigma = 6000, 200.0, 0.0
        args.set = [*args.set, "RETRY_BACKOFF_BASE_S=0.2"]
        args.timeout_s, args.settle_s, args.sample_every_s = 120.0, 2.0, 2.0
    if args.count < 100:
        parser.error("--count: at least 100")
    if not 2 <= args.review_owners < args.owners:
        parser.error("--review-owners: at least 2 (one attended, one not) and fewer than --owners")
    if args.poison_per_kind is None:
        args.poison_per_kind = args.count // 2000
    if args.smoke:
        with smoke_stores():
            figures = run(args)
        report(figures, args)
        smoke_verdict(problems=figures.problems)
        return
    figures = run(args)
    report(figures, args)
    sys.exit(1 if figures.problems else 0)


if __name__ == "__main__":
    main()
