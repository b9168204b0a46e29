"""Side by side, same workload and same simulated provider limit:
  (a) plain Celery: one task per outreach, Celery's rate_limit, autoretry on 429/5xx, 4 workers;
  (b) this product: the dispatcher, the shared budget, paced calls.

    .venv/bin/python bench/compare.py [--seconds 240] [--rpm 300] [--arms naive,product]

The provider is `llm_sim` in strict sliding-window mode (in this process). The workload: one
owner assigned a big backlog first, nine owners with smaller ones, and replies arriving every
few seconds during the run. Steady-state figures are measured after the first minute (the
first window is a ramp). Prints a table and writes var/bench/compare.svg and compare.json.

Retries and reply latency mean what they mean on the dashboard (orchestrator.figures):
a retry is a failed attempt run again (5xx, connection error), not a wait for budget (429s
are their own row); latency runs from when the work fell due (enqueued) to done (sent). The
product arm reads them with the dashboard's own selector (`product_figures`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.stack import OUT, ROOT, bench_lead, django_start, scratch_database
from orchestrator.figures import Quantiles, quantiles_of, retry_rate

BIG_OWNER_LEADS, SMALL_OWNERS, SMALL_OWNER_LEADS = 700, 9, 60


@dataclass
class ArmResult:
    name: str
    completed_per_min: float = 0.0
    provider_429s: int = 0
    provider_requests: int = 0
    retries: int = 0
    completed: int = 0
    utilization: float = 0.0
    reply_p50_s: float | None = None
    reply_p95_s: float | None = None
    replies_done: int = 0
    replies_sent_in: int = 0
    jain: float = 0.0
    per_owner: dict[str, int] = field(default_factory=dict)
    peak_window_requests: int = 0

    @property
    def retries_per_completed(self) -> float | None:
        return retry_rate(retries=self.retries, completed=self.completed)

    @property
    def rate_429(self) -> float:
        return self.provider_429s / self.provider_requests if self.provider_requests else 0.0


def jain(values: list[int]) -> float:
    """Jain's fairness index: 1.0 = every owner got the same, 1/n = one owner got everything."""
    total = sum(values)
    return total * total / (len(values) * sum(v * v for v in values)) if total else 0.0


@dataclass(frozen=True)
class RunFigures:
    """An arm's retries, completed work and reply latency (orchestrator.figures)."""

    retries: int
    completed: int
    reply: Quantiles


def product_figures(*, since: datetime) -> RunFigures:
    """The product arm's figures since `since`, from the dashboard's selector: the published
    comparison and the dashboard cannot disagree about what a retry or a latency is."""
    from orchestrator.metrics.activity import recent_activity

    activity = recent_activity(since=since)
    return RunFigures(retries=activity.retries, completed=activity.completed, reply=activity.latency["reply"])


def naive_figures(*, done: Iterable[dict[str, Any]], retries: int) -> RunFigures:
    """The plain-Celery arm's figures from its outcome records, by the same definitions."""
    finished = list(done)
    replies = (d["done_at"] - d["enqueued_at"] for d in finished if d["kind"] == "reply")
    return RunFigures(retries=retries, completed=len(finished), reply=quantiles_of(replies))


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def workload() -> list[tuple[int, int]]:
    """(owner, n) in assignment order: the big backlog first, as a bulk assignment would."""
    return [(0, BIG_OWNER_LEADS)] + [(o, SMALL_OWNER_LEADS) for o in range(1, SMALL_OWNERS + 1)]


def start_sim(*, rpm: int, tpm: int, latency_ms: float, sigma: float = 0.0) -> Any:
    """llm_sim in this process: `latency_ms` +- half (sigma 0), or lognormal with that median."""
    from devtools.llm_sim import LLMSim

    shape: dict[str, float] = (
        {"latency_median_ms": latency_ms, "latency_sigma": sigma} if sigma > 0 else {"latency_ms": latency_ms}
    )
    sim = LLMSim(rpm=rpm, tpm=tpm, mode="window", seed=1, **shape)
    sim.start()
    return sim


class Steady:
    """Counters of the simulator at the start of the steady window, and their change after."""

    def __init__(self, sim: Any) -> None:
        self.sim, self.t0 = sim, 0.0
        self.base: dict[str, Any] = {}

    def mark(self) -> None:
        self.t0, self.base = time.monotonic(), self.sim.stats()

    def utilization(self, *, rpm: int) -> tuple[float, float]:
        now, stats = time.monotonic(), self.sim.stats()
        minutes = (now - self.t0) / 60
        return (stats["admitted"] - self.base["admitted"]) / (rpm * minutes), minutes


def run_naive(
    *, seconds: float, rpm: int, tpm: int, workers: int, reply_every: float, rate_limit: str, latency_ms: int
) -> ArmResult:
    import redis

    broker = "redis://127.0.0.1:6379/13"
    results = redis.Redis.from_url(broker)
    results.flushdb()
    sim = start_sim(rpm=rpm, tpm=tpm, latency_ms=latency_ms)
    env = {
        **os.environ,
        "NAIVE_BROKER": broker,
        "NAIVE_LLM_BASE_URL": sim.base_url,
        "NAIVE_RATE_LIMIT": rate_limit,
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "bench.naive_app",
                "worker",
                "-n",
                f"naive{i}@%h",
                "--concurrency",
                "1",
                "--loglevel",
                "WARNING",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(workers)
    ]
    from bench.naive_app import outreach

    try:
        now = time.time()
        for owner, n in workload():
            for i in range(n):
                outreach.delay(f"{owner}-{i}", owner, "intro", now)
        _drive(
            seconds=seconds,
            sim=sim,
            reply_every=reply_every,
            send_reply=lambda k: outreach.delay(f"reply-{k}", k % (SMALL_OWNERS + 1), "reply", time.time()),
        )
        steady_util, minutes = sim._steady.utilization(rpm=rpm)
        done = [json.loads(v) for v in results.hgetall("naive:done").values()]
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
        stats = sim.stats()
        sim.stop()
    steady_from = sim._steady_wall
    in_window = [d for d in done if d["done_at"] >= steady_from]
    figures = naive_figures(done=done, retries=int(results.get("naive:retries") or 0))
    per_owner = {str(o): sum(1 for d in in_window if d["owner"] == o) for o in range(SMALL_OWNERS + 1)}
    return _arm_result(
        name=f"plain Celery (rate_limit={rate_limit} per worker x {workers}, autoretry)",
        completed_per_min=len(in_window) / minutes,
        stats=stats,
        figures=figures,
        utilization=steady_util,
        replies_sent_in=sim._replies,
        per_owner=per_owner,
    )


def _drive(*, seconds: float, sim: Any, reply_every: float, send_reply: Any) -> None:
    """Replies arrive every `reply_every` s; the steady window starts after the first minute."""
    start, k = time.monotonic(), 0
    sim._steady, sim._replies = Steady(sim), 0
    marked = False
    while (elapsed := time.monotonic() - start) < seconds:
        if not marked and elapsed >= 60:
            sim._steady.mark()
            sim._steady_wall = time.time()
            marked = True
        if elapsed >= k * reply_every:
            send_reply(k)
            sim._replies += 1
            k += 1
        time.sleep(0.2)
    print(f"  ran {seconds:.0f}s; live window now {sim.stats()['window']}", flush=True)


def run_product(*, seconds: float, rpm: int, tpm: int, reply_every: float, latency_ms: int) -> ArmResult:
    database_url = scratch_database(name="outreach_bench_compare")
    started_at = datetime.now(UTC)
    sim = start_sim(rpm=rpm, tpm=tpm, latency_ms=latency_ms)
    from devtools.processes import stack_env
    from devtools.smtp_sink import SMTPSink

    smtp = SMTPSink(keep_messages=False).start()
    env = stack_env(
        llm_base_url=sim.base_url,
        smtp_port=smtp.port,
        DATABASE_URL=database_url,
        REDIS_URL="redis://127.0.0.1:6379/12",
        LLM_RPM=str(rpm),
        LLM_TPM=str(tpm),
        DISPATCH_INTERVAL="1",
        LOG_LEVEL="WARNING",
    )
    django_start(env=env)
    owners = _seed_product()
    from devtools.processes import ProcessGroup, start_pipeline

    group = ProcessGroup(log_dir=OUT / "product-logs", env=env)
    start_pipeline(group)  # the Procfile's recipe (config.workers)
    try:
        _drive(seconds=seconds, sim=sim, reply_every=reply_every, send_reply=lambda k: _reply(owners, k))
        steady_util, minutes = sim._steady.utilization(rpm=rpm)
    finally:
        group.stop()
        stats = sim.stats()
        sim.stop()
        smtp.stop()
    return _product_result(
        stats=stats, steady_util=steady_util, minutes=minutes, sim=sim, started_at=started_at
    )


def _seed_product() -> list[Any]:
    from datetime import time as dtime

    from django.utils import timezone

    from outreach.idempotency import intro_key
    from outreach.models import Lead, Outreach, State
    from outreach.services.owners import OwnerSpec, owner_upsert

    owners = [
        owner_upsert(
            spec=OwnerSpec(
                f"owner {o}",
                "agent",
                100_000,
                dtime(0),
                dtime(0),
                "UTC",
                working_days="1234567",
                organization="Bench",
            )
        )[0]
        for o in range(SMALL_OWNERS + 1)
    ]
    now = timezone.now()
    for owner_index, n in workload():
        owner = owners[owner_index]
        leads = Lead.objects.bulk_create(
            bench_lead(owner=owner, n=f"{owner_index}-{i}", domain="bench.example") for i in range(n)
        )
        Outreach.objects.bulk_create(
            Outreach(
                lead=lead,
                owner=owner,
                kind="intro",
                tier=2,
                state=State.QUEUED,
                not_before=now,
                idempotency_key=intro_key(lead_id=lead.pk),
                state_changed_at=now,
            )
            for lead in leads
        )
    return owners


def _reply(owners: list[Any], k: int) -> None:
    from outreach.idempotency import reply_key
    from outreach.models import Lead, Outreach
    from outreach.services.queue import outreach_enqueue

    lead = Lead.objects.filter(owner=owners[k % len(owners)]).order_by("id")[k // len(owners)]
    outreach_enqueue(
        lead=lead,
        kind=Outreach.Kind.REPLY,
        idempotency_key=reply_key(message_id=f"<bench-{k}@bench.example>"),
        context={"inbound": {"subject": "Re: hello", "body": "Tell me more."}},
    )


def _product_result(
    *, stats: dict[str, Any], steady_util: float, minutes: float, sim: Any, started_at: datetime
) -> ArmResult:
    from outreach.models import Outreach, State

    steady_from = datetime.fromtimestamp(sim._steady_wall, tz=UTC)
    in_window = Outreach.objects.filter(state=State.SENT, sent_at__gte=steady_from)
    per_owner = {o.name.split()[-1]: in_window.filter(owner=o).count() for o in _owners()}
    figures = product_figures(since=started_at)
    return _arm_result(
        name="this product (dispatcher + shared budget + paced calls)",
        completed_per_min=in_window.count() / minutes,
        stats=stats,
        figures=figures,
        utilization=steady_util,
        replies_sent_in=sim._replies,
        per_owner=per_owner,
    )


def _arm_result(
    *,
    name: str,
    completed_per_min: float,
    stats: dict[str, Any],
    figures: RunFigures,
    utilization: float,
    replies_sent_in: int,
    per_owner: dict[str, int],
) -> ArmResult:
    """Both arms' row of the table, from the simulator's counters and the shared figures."""
    return ArmResult(
        name=name,
        completed_per_min=completed_per_min,
        provider_429s=stats["rejected_429"],
        provider_requests=stats["requests"],
        retries=figures.retries,
        completed=figures.completed,
        utilization=utilization,
        reply_p50_s=_seconds(figures.reply.p50_s),
        reply_p95_s=_seconds(figures.reply.p95_s),
        replies_done=figures.reply.count,
        replies_sent_in=replies_sent_in,
        jain=jain(list(per_owner.values())),
        per_owner=per_owner,
        peak_window_requests=stats["peak_window"]["requests"],
    )


def _owners() -> list[Any]:
    from outreach.models import Owner

    return list(Owner.objects.filter(organization__name="Bench").order_by("id"))


def report(results: list[ArmResult], *, rpm: int, seconds: float) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, Any]] = [
        ("completed outreach / min (steady)", lambda r: f"{r.completed_per_min:.1f}"),
        ("LLM utilization (steady, % of limit)", lambda r: f"{100 * r.utilization:.1f}%"),
        ("peak requests in any 60 s window", lambda r: f"{r.peak_window_requests} / {rpm}"),
        (
            "provider 429s (of requests)",
            lambda r: f"{r.provider_429s} of {r.provider_requests} ({100 * r.rate_429:.2f}%)",
        ),
        (
            "transient retries per completed job",
            lambda r: f"{_rate(r.retries_per_completed)} ({r.retries}/{r.completed})",
        ),
        (
            "reply latency p50 / p95 (s)",
            lambda r: f"{r.reply_p50_s} / {r.reply_p95_s} ({r.replies_done}/{r.replies_sent_in} done)",
        ),
        ("fairness across owners (Jain)", lambda r: f"{r.jain:.3f}"),
    ]
    width = max(len(label) for label, _ in rows)
    print(
        f"\nworkload: {BIG_OWNER_LEADS} + {SMALL_OWNERS}x{SMALL_OWNER_LEADS} intros, replies during the run; "
        f"provider {rpm} rpm strict sliding window; {seconds:.0f}s per arm\n"
    )
    for i, r in enumerate(results):
        print(f"({chr(97 + i)}) {r.name}")
    print("\n" + " " * width + "".join(f"  {'(' + chr(97 + i) + ')':>36}" for i in range(len(results))))
    for label, get in rows:
        print(label.ljust(width) + "".join(f"  {get(r):>36}" for r in results))
    (OUT / "compare.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    _chart(results)
    print(f"\nwrote {OUT / 'compare.json'} and {OUT / 'compare.svg'}")


def _chart(results: list[ArmResult]) -> None:
    from orchestrator.metrics.charts import panels_chart, svg_document

    chart = panels_chart(
        chart_id="chart-compare",
        title="Plain Celery vs this product",
        labels=[f"({chr(97 + i)})" for i in range(len(results))],
        panels=[
            ("LLM utilization %", [100 * r.utilization for r in results]),
            ("provider 429s", [float(r.provider_429s) for r in results]),
            ("reply latency p50 (s)", [r.reply_p50_s or 0.0 for r in results]),
            ("fairness (Jain)", [r.jain for r in results]),
        ],
    )
    (OUT / "compare.svg").write_text(svg_document(chart))


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=240)
    parser.add_argument("--rpm", type=int, default=300)
    parser.add_argument("--tpm", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--reply-every", type=float, default=4.0)
    parser.add_argument("--arms", default="naive,product")
    parser.add_argument(
        "--latency-ms", type=int, default=400, help="The simulated model's latency (default 400)."
    )
    args = parser.parse_args()
    if args.seconds < 90:
        parser.error("--seconds: at least 90 (the first minute is a ramp, excluded from steady figures)")
    results = []
    for arm in args.arms.split(","):
        print(f"running {arm} ...", flush=True)
        if arm == "naive":
            per_worker = (
                f"{args.rpm // 3 // args.workers}/m"  # a careful user: the limit split across workers
            )
            results.append(
                run_naive(
                    seconds=args.seconds,
                    rpm=args.rpm,
                    tpm=args.tpm,
                    workers=args.workers,
                    reply_every=args.reply_every,
                    rate_limit=per_worker,
                    latency_ms=args.latency_ms,
                )
            )
        elif arm == "product":
            results.append(
                run_product(
                    seconds=args.seconds,
                    rpm=args.rpm,
                    tpm=args.tpm,
                    reply_every=args.reply_every,
                    latency_ms=args.latency_ms,
                )
            )
        else:
            parser.error(f"--arms: unknown arm {arm!r}; use naive and/or product")
    report(results, rpm=args.rpm, seconds=args.seconds)


if __name__ == "__main__":
    main()
