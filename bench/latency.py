"""Saturate the key at a real LLM's latency: the stack run the way production runs it.

    .venv/bin/python bench/latency.py --rpm 600,3000 --duration 180
    .venv/bin/python bench/latency.py --rpm 600 --duration 90                    # a quick look
    .venv/bin/python bench/latency.py --rpm 600 --kill-generation-at 60         # crash mid-run
    .venv/bin/python bench/latency.py --rpm 600 --set DISPATCH_MAX_IN_FLIGHT=200 # try a setting
    .venv/bin/python bench/latency.py --smoke                                   # seconds (CI)

The worker lines of the root Procfile (orchestrator, generation, send, dead_letter, beat) are
started exactly as written, only `$VARIABLES` substituted from the environment, against:
`llm_sim` in its own process (strict sliding window, lognormal latency, median --median-ms,
sigma --sigma; --foreign-share F: another client on the key taking F of it), an SMTP sink in
this process counting Message-IDs, a scratch PostgreSQL database `outreach_bench_latency`
(dropped and created per run) and a private redis-server on a free port (flushed per run).
Everything else is the product's defaults, as in production (--set NAME=VALUE overrides one).

Per run: --owners owners with --leads queued intros (default: 1.5 x what the key allows in
--duration, so the backlog never runs dry), and a reply every --reply-every s (created through
nurture.intake.replies as the webhook does). Every second: the simulator's counters and
concurrency, the outreach in DISPATCHED + GENERATING, the process trees of every Procfile line
(RSS, CPU). Figures (steady state = after --warmup):
- utilization: requests the provider admitted per minute in the steady window (all clients on
  the key, the foreign one included) / the limit; "own" is this product's share alone;
- 429 share: refused / sent by this product, whole run;
- in flight p50/p95: DISPATCHED + GENERATING, sampled each second in the steady window;
- reply p50/p95: a reply's created -> sent. Replies are answered at once (REPLY_QUIET_S=0, in
  this process, which takes them, and in the workers) unless --set REPLY_QUIET_S=N: the bench
  measures how fast the product answers, not the quiet period it is told to wait; with N > 0
  the figure includes it (and a reply joined into a pending one is not a second reply);
- RSS: the max over samples of each Procfile line's process tree (the prefork children included);
- CPU ms per outreach: the workers' process-tree CPU in the steady window / outreach sent in it,
  and each Procfile line's part of it;
- duplicates: Message-IDs the sink received more than once (and SENT rows not received).
With --kill-generation-at S the generation line's process group is SIGKILLed at S s and started
again: the report says how many jobs were stranded in DISPATCHED/GENERATING and how long each
took to get back to QUEUED (or to move on at all).

Writes var/bench/latency-<timestamp>.json and prints a table, one column per --rpm.
Percentiles, utilization and rates are orchestrator.figures'.

--smoke: 600 rpm, 200 ms calls, 3 owners and 60 intros, a reply every 2 s; the run's clock
starts when the first outreach is sent (the workers' boot varies with the machine's load) and
lasts 12 s, steady after 3 s; its own scratch database and redis-server. Exits 1 unless work
and a reply were sent, no email arrived twice or went missing and no Procfile line died.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.stack import (
    SMOKE_HELP,
    bench_intro,
    bench_lead,
    database_for,
    first_wait,
    llm_sim_argv,
    out_dir,
    private_redis_django,
    process_trees,
    production_env,
    smoke_stores,
    smoke_verdict,
)
from orchestrator.figures import per_minute, percentile, ratio, utilization

DB_NAME = "outreach_bench_latency"
LINES = ("orchestrator", "generation", "reply", "send", "dead_letter", "beat")  # the Procfile's; no web
IN_FLIGHT = ("dispatched", "generating")
CALLS_PER_OUTREACH = 3  # plan, context, message (settings.LLM_CALLS_PER_OUTREACH)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- one run ---------------------------------------------------------------------------------------


@dataclass
class Sample:
    t_s: float
    admitted: int  # this product's requests the provider admitted so far
    shared_admitted: int  # the foreign client's
    provider_in_flight: int
    in_flight: int  # DISPATCHED + GENERATING rows
    sent: int
    rss_kb: dict[str, int]
    cpu_s: dict[str, float]  # cumulative, a restarted line's earlier trees included


@dataclass
class Run:
    rpm: int
    leads: int
    steady_s: float = 0.0
    utilization: float | None = None
    own_utilization: float | None = None
    provider_requests: int = 0
    rejected_429: int = 0
    share_429: float | None = None
    peak_window_requests: int = 0
    provider_latency_mean_ms: float = 0.0
    in_flight_p50: float | None = None
    in_flight_p95: float | None = None
    provider_in_flight_p50: float | None = None
    provider_in_flight_p95: float | None = None
    replies_created: int = 0
    replies_sent: int = 0
    reply_p50_s: float | None = None
    reply_p95_s: float | None = None
    sent: int = 0
    sent_per_min_steady: float | None = None
    cpu_ms_per_outreach: float | None = None
    cpu_s_steady: dict[str, float] = field(default_factory=dict)
    rss_mb_max: dict[str, float] = field(default_factory=dict)
    smtp_messages: int = 0
    duplicates: int = 0
    sent_not_received: int = 0
    kill: dict[str, Any] = field(default_factory=dict)
    dead_processes: list[str] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)


def http_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return dict(json.loads(response.read()))


def run_once(*, args: argparse.Namespace, rpm: int, redis_url: str) -> Run:
    from devtools.processes import ProcessGroup, free_port, stack_env
    from devtools.procfile import procfile_argv
    from devtools.smtp_sink import SMTPSink

    leads = args.leads or math.ceil(1.5 * rpm / CALLS_PER_OUTREACH * args.duration / 60) + 100
    run, logs = Run(rpm=rpm, leads=leads), out_dir() / "latency-logs" / f"{rpm}rpm"
    for old in logs.glob("*.log"):
        old.unlink()
    database_fresh()
    sink, sim_port = SMTPSink().start(), free_port()
    env = stack_env(
        llm_base_url=f"http://127.0.0.1:{sim_port}/v1",
        smtp_port=sink.port,
        DATABASE_URL=os.environ["DATABASE_URL"],
        REDIS_URL=redis_url,
        LLM_RPM=str(rpm),
        LLM_TPM=str(args.tpm or rpm * 10_000),
        **production_env(**dict(setting.split("=", 1) for setting in args.set)),
    )
    provider, workers = ProcessGroup(log_dir=logs, env=env), ProcessGroup(log_dir=logs, env=env)
    try:
        provider.start("llm_sim", sim_command(args=args, rpm=rpm, port=sim_port))
        seed(owners=args.owners, leads=leads)
        wait_healthy(f"http://127.0.0.1:{sim_port}/health")
        commands = {name: procfile_argv(name) for name in LINES}  # as written, run by a shell
        for name in LINES:
            workers.start(name, commands[name])
        if args.smoke:  # the clock starts once the stack sends: its boot time varies with the load
            first_wait(ready=first_sent, what="outreach sent")
        samples = drive(
            args=args,
            run=run,
            workers=workers,
            commands=commands,
            stats_url=f"http://127.0.0.1:{sim_port}/stats",
        )
        time.sleep(args.settle_s)  # a late duplicate (a redelivered task) would land now
        stats = http_json(f"http://127.0.0.1:{sim_port}/stats")
    finally:
        workers.stop()
        provider.stop()
        sink.stop()
    figures(run=run, args=args, samples=samples, stats=stats, sink=sink)
    return run


def sim_command(*, args: argparse.Namespace, rpm: int, port: int) -> list[str]:
    return llm_sim_argv(
        port=port,
        rpm=rpm,
        tpm=args.tpm or rpm * 10_000,
        mode="window",
        latency_median_ms=args.median_ms,
        latency_sigma=args.sigma,
        shared_rps=f"{args.foreign_share * rpm / 60:.6f}",
        seed=args.seed,
        log_every=10,
    )


def wait_healthy(url: str, *, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            http_json(url)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def first_sent() -> bool:
    from outreach.models import Outreach, State

    return Outreach.objects.filter(state=State.SENT).exists()


def database_fresh() -> None:
    from django.core.management import call_command
    from django.db import connections

    connections.close_all()
    database_for(name=DB_NAME)  # dropped and created (or BENCH_DATABASE_URL, kept)
    call_command("migrate", verbosity=0)


def seed(*, owners: int, leads: int) -> None:
    """Autonomous owners (no review: every draft is sent), open all day, no daily cap worth the name."""
    from datetime import time as dtime

    from django.utils import timezone

    from outreach.models import Lead, Outreach
    from outreach.services.owners import OwnerSpec, owner_upsert

    made = [
        owner_upsert(
            spec=OwnerSpec(
                f"latency owner {o}",
                "agent",
                1_000_000,
                dtime(0),
                dtime(0),
                "UTC",
                working_days="1234567",
                organization="Latency",
            )
        )[0]
        for o in range(owners)
    ]
    now = timezone.now()
    for start in range(0, leads, 2000):
        batch = Lead.objects.bulk_create(
            bench_lead(owner=made[i % owners], n=i, domain="latency.example")
            for i in range(start, min(leads, start + 2000))
        )
        Outreach.objects.bulk_create(bench_intro(lead=lead, now=now) for lead in batch)


def drive(
    *, args: argparse.Namespace, run: Run, workers: Any, commands: dict[str, list[str]], stats_url: str
) -> list[Sample]:
    """The run's clock: one sample a second, a reply every --reply-every s, the kill if asked."""
    rng, started, samples = random.Random(args.seed), time.monotonic(), list[Sample]()
    cpu_before_restart: dict[str, float] = dict.fromkeys(LINES, 0.0)
    next_reply, replies, killed = 0.0, 0, False
    while (t := time.monotonic() - started) < args.duration:
        if dead := workers.dead():
            run.dead_processes = sorted(set(run.dead_processes) | set(dead))
        if t >= next_reply:
            reply_arrive(number=replies, lead=rng.randrange(run.leads))
            replies, next_reply = replies + 1, next_reply + args.reply_every
        if args.kill_generation_at is not None and not killed and t >= args.kill_generation_at:
            killed = True
            if samples:
                cpu_before_restart["generation"] = samples[-1].cpu_s["generation"]
            run.kill = generation_kill(workers=workers, argv=commands["generation"], at_s=t)
        samples.append(sample_take(t=t, workers=workers, stats_url=stats_url, offset=cpu_before_restart))
        time.sleep(max(0.0, started + len(samples) - time.monotonic()))
    run.replies_created = replies
    return samples


def reply_arrive(*, number: int, lead: int) -> None:
    """A lead answers: the webhook's service, as the signed POST would call it."""
    from nurture.intake.replies import InboundReply, reply_receive

    reply = InboundReply(
        lead_email=f"lead{lead}@latency.example",
        message_id=f"<bench-reply-{number}@latency.example>",
        subject="Re: hello",
        body="Sounds interesting, tell me more.",
    )
    reply_receive(reply=reply)


def generation_kill(*, workers: Any, argv: list[str], at_s: float) -> dict[str, Any]:
    """SIGKILL the generation line's process group (the pool with it), start it again at once."""
    from outreach.models import Outreach

    stranded = list(Outreach.objects.filter(state__in=IN_FLIGHT).values_list("id", flat=True))
    killed_at = datetime.now(UTC)
    workers.kill("generation")
    workers.procs["generation"].wait(10)
    workers.start("generation", argv)
    print(f"  killed generation at {at_s:.0f}s: {len(stranded)} outreach in flight", flush=True)
    return {"at_s": round(at_s, 1), "killed_at": killed_at.isoformat(), "stranded_ids": stranded}


def sample_take(*, t: float, workers: Any, stats_url: str, offset: dict[str, float]) -> Sample:
    from django.db.models import Count

    from outreach.models import Outreach

    stats = http_json(stats_url)
    states = dict(Outreach.objects.values_list("state").annotate(n=Count("id")).order_by())
    trees = process_trees({name: workers.procs[name].pid for name in LINES})
    sample = Sample(
        t_s=round(t, 2),
        admitted=stats["admitted"],
        shared_admitted=stats["shared"]["admitted"],
        provider_in_flight=stats["in_flight"],
        in_flight=sum(states.get(s, 0) for s in IN_FLIGHT),
        sent=states.get("sent", 0),
        rss_kb={n: tree.rss_kb for n, tree in trees.items()},
        cpu_s={n: round(tree.cpu_s + offset[n], 2) for n, tree in trees.items()},
    )
    if int(t) % 10 == 0:
        print(
            f"  {t:5.0f}s  admitted {sample.admitted:>6}  in flight {sample.in_flight:>4} "
            f"(provider {sample.provider_in_flight:>4})  sent {sample.sent:>6}",
            flush=True,
        )
    return sample


# --- figures ---------------------------------------------------------------------------------------


def figures(
    *, run: Run, args: argparse.Namespace, samples: list[Sample], stats: dict[str, Any], sink: Any
) -> None:
    def pct(values: list[float], fraction: float) -> float | None:
        found = percentile(values=values, fraction=fraction)
        return None if found is None else round(found, 2)

    steady = [s for s in samples if s.t_s >= args.warmup]
    first, last = steady[0], steady[-1]
    seconds = last.t_s - first.t_s
    run.steady_s = round(seconds, 1)
    own, foreign = last.admitted - first.admitted, last.shared_admitted - first.shared_admitted
    run.utilization = _round(utilization(used=own + foreign, limit_per_min=run.rpm, seconds=seconds), 4)
    run.own_utilization = _round(utilization(used=own, limit_per_min=run.rpm, seconds=seconds), 4)
    run.provider_requests, run.rejected_429 = stats["requests"], stats["rejected_429"]
    run.share_429 = _round(ratio(run.rejected_429, run.provider_requests), 4)
    run.peak_window_requests = stats["peak_window"]["requests"]
    run.provider_latency_mean_ms = stats["latency"]["mean_ms"]
    run.in_flight_p50 = pct([s.in_flight for s in steady], 0.5)
    run.in_flight_p95 = pct([s.in_flight for s in steady], 0.95)
    run.provider_in_flight_p50 = pct([s.provider_in_flight for s in steady], 0.5)
    run.provider_in_flight_p95 = pct([s.provider_in_flight for s in steady], 0.95)
    run.sent, sent_steady = samples[-1].sent, last.sent - first.sent
    run.sent_per_min_steady = _round(per_minute(count=sent_steady, seconds=seconds), 1)
    run.cpu_s_steady = {n: round(last.cpu_s[n] - first.cpu_s[n], 1) for n in LINES}
    run.cpu_ms_per_outreach = _round(ratio(1000 * sum(run.cpu_s_steady.values()), sent_steady), 1)
    run.rss_mb_max = {n: round(max(s.rss_kb[n] for s in samples) / 1024, 1) for n in LINES}
    reply_figures(run=run, pct=pct)
    sink_figures(run=run, sink=sink)
    if run.kill:
        kill_figures(run=run, pct=pct)
    run.samples = [asdict(s) for s in samples]


def _round(value: float | None, places: int) -> float | None:
    return None if value is None else round(value, places)


def reply_figures(*, run: Run, pct: Any) -> None:
    from outreach.models import Outreach, State

    done = Outreach.objects.filter(kind=Outreach.Kind.REPLY, state=State.SENT).values_list(
        "created_at", "sent_at"
    )
    waits = [(sent - created).total_seconds() for created, sent in done if sent is not None]
    run.replies_sent, run.reply_p50_s, run.reply_p95_s = len(waits), pct(waits, 0.5), pct(waits, 0.95)


def sink_figures(*, run: Run, sink: Any) -> None:
    from collections import Counter

    from outreach.models import Outreach, State

    received = Counter(
        str(m.message.get("Message-ID", "")).strip().strip("<>").lower() for m in sink.messages
    )
    run.smtp_messages = sum(received.values())
    run.duplicates = sum(n - 1 for n in received.values() if n > 1)
    sent_ids = Outreach.objects.filter(state=State.SENT).values_list("message_id", flat=True)
    run.sent_not_received = sum(1 for m in sent_ids if not received.get(m.strip().strip("<>").lower()))


def kill_figures(*, run: Run, pct: Any) -> None:
    """How long each stranded job took to get back to QUEUED, or to move on at all."""
    from outreach.models import Outreach, OutreachEvent

    killed_at, ids = datetime.fromisoformat(run.kill["killed_at"]), run.kill.pop("stranded_ids")
    events = OutreachEvent.objects.filter(outreach_id__in=ids, at__gte=killed_at).order_by("at")
    first_any: dict[int, float] = {}
    first_queued: dict[int, float] = {}
    for outreach_id, to_state, at in events.values_list("outreach_id", "to_state", "at"):
        first_any.setdefault(outreach_id, (at - killed_at).total_seconds())
        if to_state == "queued":
            first_queued.setdefault(outreach_id, (at - killed_at).total_seconds())
    back = list(first_queued.values())
    states = dict(Outreach.objects.filter(id__in=ids).values_list("id", "state"))
    run.kill.update(
        stranded=len(ids),
        back_to_queued=len(back),
        back_to_queued_p50_s=pct(back, 0.5),
        back_to_queued_max_s=round(max(back), 1) if back else None,
        moved_on=len(first_any),
        still_in_flight=sum(1 for s in states.values() if s in IN_FLIGHT),
        stranded_sent=sum(1 for s in states.values() if s == "sent"),
    )


# --- report ----------------------------------------------------------------------------------------


def _cpu_ms_each(run: Run, line: str) -> str:
    """One Procfile line's share of the CPU ms per outreach (steady window)."""
    if not run.cpu_ms_per_outreach or not run.cpu_s_steady:
        return "-"
    total_s = sum(run.cpu_s_steady.values())
    return f"{run.cpu_ms_per_outreach * run.cpu_s_steady.get(line, 0) / total_s:.1f}" if total_s else "-"


def table(runs: list[Run], args: argparse.Namespace) -> str:
    def pair(a: Any, b: Any, unit: str = "") -> str:
        return "-" if a is None else f"{a:g} / {b:g}{unit}"

    rows: list[tuple[str, list[str]]] = [
        ("limit (requests/min)", [f"{r.rpm:,}" for r in runs]),
        ("leads seeded / replies created", [f"{r.leads:,} / {r.replies_created}" for r in runs]),
        ("utilization (key, steady)", [_percent(r.utilization, 1) for r in runs]),
        ("  this product's share", [_percent(r.own_utilization, 1) for r in runs]),
        (
            "429 share",
            [f"{_percent(r.share_429, 2)} ({r.rejected_429} of {r.provider_requests:,})" for r in runs],
        ),
        ("peak requests in a 60 s window", [f"{r.peak_window_requests:,}" for r in runs]),
        ("provider latency mean", [f"{r.provider_latency_mean_ms / 1000:.2f} s" for r in runs]),
        ("in flight p50 / p95 (rows)", [pair(r.in_flight_p50, r.in_flight_p95) for r in runs]),
        (
            "  at the provider p50 / p95",
            [pair(r.provider_in_flight_p50, r.provider_in_flight_p95) for r in runs],
        ),
        (
            "reply p50 / p95 (created -> sent)",
            [pair(r.reply_p50_s, r.reply_p95_s, " s") + f" ({r.replies_sent} sent)" for r in runs],
        ),
        ("outreach sent (run) / per min (steady)", [f"{r.sent:,} / {r.sent_per_min_steady}" for r in runs]),
        (
            "CPU ms per outreach (steady)",
            ["-" if r.cpu_ms_per_outreach is None else f"{r.cpu_ms_per_outreach:g}" for r in runs],
        ),
        *[(f"  {name}", [_cpu_ms_each(r, name) for r in runs]) for name in LINES],
        *[(f"RSS max MB {name}", [f"{r.rss_mb_max.get(name, 0):.0f}" for r in runs]) for name in LINES],
        (
            "duplicates at the sink",
            [f"{r.duplicates} (SENT not received: {r.sent_not_received})" for r in runs],
        ),
    ]
    if any(r.kill for r in runs):
        k = [r.kill for r in runs]
        rows.append(
            (
                "kill: stranded -> back to QUEUED",
                [
                    f"{x.get('stranded')} -> {x.get('back_to_queued')} (p50 {x.get('back_to_queued_p50_s')} s, "
                    f"max {x.get('back_to_queued_max_s')} s)"
                    for x in k
                ],
            )
        )
        rows.append(
            (
                "  moved on at all / sent / still in flight",
                [f"{x.get('moved_on')} / {x.get('stranded_sent')} / {x.get('still_in_flight')}" for x in k],
            )
        )
    if any(r.dead_processes for r in runs):
        rows.append(("processes that died", [", ".join(r.dead_processes) or "-" for r in runs]))
    width = max(len(label) for label, _ in rows)
    cols = [max(len(v[i]) for _, v in rows) for i in range(len(runs))]
    head = (
        f"latency median {args.median_ms:g} ms sigma {args.sigma:g}, {args.duration:g} s runs (steady after "
        f"{args.warmup:g} s), {args.owners} owners, foreign share {args.foreign_share:g}"
    )
    lines = [head, ""] + [
        label.ljust(width) + "  " + "  ".join(v.rjust(c) for v, c in zip(values, cols, strict=True))
        for label, values in rows
    ]
    return "\n".join(lines)


def _percent(value: float | None, places: int) -> str:
    return "-" if value is None else f"{100 * value:.{places}f}%"


def main() -> None:
    args = arguments()
    if args.smoke:
        with smoke_stores():
            runs = runs_all(args=args)
        smoke_verdict(problems=smoke_problems(runs=runs))
    else:
        runs_all(args=args)


def runs_all(*, args: argparse.Namespace) -> list[Run]:
    runs = []
    # Read by reply_arrive here (the intake runs in this process) and by the workers (their
    # environment is this one's): the same quiet period on both sides, 0 unless --set.
    os.environ["REPLY_QUIET_S"] = dict(s.split("=", 1) for s in args.set).get("REPLY_QUIET_S", "0")
    with private_redis_django(db_name=DB_NAME) as redis_url:
        import redis

        for rpm in args.rpm:
            print(f"\n--- {rpm} requests/min, {args.duration:g} s ---", flush=True)
            redis.Redis.from_url(redis_url).flushall()
            runs.append(run_once(args=args, rpm=rpm, redis_url=redis_url))
    print("\n" + table(runs, args))
    out_dir().mkdir(parents=True, exist_ok=True)
    path = out_dir() / f"latency-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(
        json.dumps({"args": vars(args), "runs": [asdict(r) for r in runs]}, indent=1, default=str)
    )
    print(f"\nwrote {path}; process logs in {out_dir() / 'latency-logs'}")
    return runs


def smoke_problems(*, runs: list[Run]) -> list[str]:
    """Broken, not slow: nothing sent in the steady window, no reply sent, an email twice or
    SENT and never received, a Procfile line that died."""
    problems = []
    for r in runs:
        if not r.sent_per_min_steady:
            problems.append(f"{r.rpm} rpm: nothing sent in the steady window")
        if not r.replies_sent:
            problems.append(f"{r.rpm} rpm: no reply sent (of {r.replies_created})")
        if r.duplicates or r.sent_not_received:
            problems.append(
                f"{r.rpm} rpm: {r.duplicates} duplicates, {r.sent_not_received} SENT not received"
            )
        if r.dead_processes:
            problems.append(f"{r.rpm} rpm: died: {', '.join(r.dead_processes)}")
    return problems


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rpm", action="append", default=[], help="Key limit(s): repeat or comma list (600,3000)."
    )
    parser.add_argument(
        "--tpm", type=int, default=0, help="Tokens/min of the key; default rpm x 10,000 (never binds)."
    )
    parser.add_argument(
        "--median-ms", type=float, default=3000.0, help="Provider latency median (default 3000)."
    )
    parser.add_argument("--sigma", type=float, default=0.5, help="Lognormal sigma (default 0.5).")
    parser.add_argument("--duration", type=float, default=180.0, help="Seconds per run (default 180).")
    parser.add_argument(
        "--warmup",
        type=float,
        default=None,
        help="Seconds before the steady window; default min(60, duration/3).",
    )
    parser.add_argument("--owners", type=int, default=20)
    parser.add_argument(
        "--leads", type=int, default=0, help="Queued intros; default 1.5 x what the key allows in the run."
    )
    parser.add_argument(
        "--reply-every", type=float, default=3.0, help="Seconds between inbound replies (default 3)."
    )
    parser.add_argument(
        "--foreign-share", type=float, default=0.0, help="Share (0-1) of the key another client takes."
    )
    parser.add_argument(
        "--kill-generation-at",
        type=float,
        default=None,
        help="SIGKILL the generation line at S s, restart it.",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="A setting for the workers."
    )
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.rpm, args.median_ms, args.sigma, args.owners, args.leads = ["600"], 200.0, 0.0, 3, 60
        args.duration, args.warmup, args.reply_every, args.settle_s = 30.0, 3.0, 2.0, 2.0
    try:
        args.rpm = [int(v) for chunk in args.rpm or ["600,3000"] for v in chunk.split(",") if v.strip()]
    except ValueError:
        parser.error(f"--rpm: whole numbers, got {args.rpm}")
    checks = [
        ("--rpm", all(r >= 1 for r in args.rpm), "each at least 1"),
        ("--median-ms", args.median_ms > 0, "must be more than 0"),
        ("--sigma", 0 <= args.sigma <= 5, "must be 0-5"),
        ("--duration", args.duration >= 30, "at least 30 s (a steady window needs some)"),
        ("--owners", args.owners >= 1, "at least 1"),
        ("--leads", args.leads >= 0, "0 (auto) or more"),
        ("--reply-every", args.reply_every > 0, "must be more than 0"),
        ("--foreign-share", 0 <= args.foreign_share < 1, "must be in [0, 1)"),
        ("--set", all("=" in s for s in args.set), "NAME=VALUE"),
    ]
    for flag, ok, message in checks:
        if not ok:
            parser.error(f"{flag}: {message}")
    args.warmup = min(60.0, args.duration / 3) if args.warmup is None else args.warmup
    if args.smoke:  # past the checks: a full run needs 30 s, a smoke run a steady window at all
        args.duration = 12.0
    steady_s = 5 if args.smoke else 10
    if not 0 <= args.warmup < args.duration - steady_s:
        parser.error(f"--warmup: must leave at least {steady_s} s of --duration")
    if args.kill_generation_at is not None and not 0 < args.kill_generation_at < args.duration:
        parser.error("--kill-generation-at: must fall inside --duration")
    return args


if __name__ == "__main__":
    main()
