"""Side by side, same workload and same simulated provider limit:
  (a) plain Celery: one task per outreach, Celery's rate_limit, autoretry on 429/5xx, 4 workers;
  (b) this product: the dispatcher, the shared budget, paced calls.

    .venv/bin/python bench/compare.py [--seconds 240] [--rpm 300] [--arms naive,product]
    .venv/bin/python bench/compare.py --smoke   # both arms, a tiny workload, seconds (CI)

The provider is `llm_sim` in strict sliding-window mode (in this process). The workload: one
owner assigned a big backlog first, nine owners with smaller ones, and replies arriving every
few seconds during the run. Steady-state figures are measured after the first minute (the
first window is a ramp). Prints a table and writes var/bench/compare.svg and compare.json.

Retries and reply latency mean what they mean on the dashboard (orchestrator.figures):
a retry is a failed attempt run again (5xx, connection error), not a wait for budget (429s
are their own row); latency runs from when the work fell due (enqueued) to done (sent). The
product arm reads them with the dashboard's own selector (`product_figures`). Utilization and
Jain's index are orchestrator.figures' too.

--smoke runs both arms on a tiny workload (40 + 3 x 10 intros, 8 s each from the first
outreach done, the steady window after 2 s) on its own scratch stores, and exits 1 unless each arm completed work in its steady
window and shared it out (a Jain's index to report).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.stack import (
    SMOKE_HELP,
    bench_lead,
    django_start,
    first_wait,
    out_dir,
    redis_for,
    scratch_database,
    smoke_stores,
    smoke_verdict,
    stack_log_level,
)
from orchestrator.figures import (
    Quantiles,
    jain_index,
    per_minute,
    quantiles_of,
    ratio,
    retry_rate,
    utilization,
)


@dataclass(frozen=True)
class Workload:
    """One owner assigned a big backlog first, then smaller owners; replies during the run."""

    big_owner_leads: int
    small_owners: int
    small_owner_leads: int
    ramp_s: float  # the first window is a ramp: steady figures start after it
    # Smoke: the run's clock starts when the arm's first outreach is done, at most this long
    # after the workers were started (on a loaded machine they take 10-30 s to boot), so a
    # slow start is not taken for a broken run. 0: the clock starts at once (the full run).
    ready_timeout_s: float = 0.0

    @property
    def owners(self) -> int:
        return self.small_owners + 1

    def assignments(self) -> list[tuple[int, int]]:
        """(owner, n) in assignment order: the big backlog first, as a bulk assignment would."""
        return [(0, self.big_owner_leads)] + [(o, self.small_owner_leads) for o in range(1, self.owners)]


FULL = Workload(big_owner_leads=700, small_owners=9, small_owner_leads=60, ramp_s=60)
SMOKE = Workload(big_owner_leads=40, small_owners=3, small_owner_leads=10, ramp_s=2, ready_timeout_s=90)


@dataclass
class ArmResult:
    name: str
    completed_per_min: float = 0.0
    provider_429s: int = 0
    provider_requests: int = 0
    retries: int = 0
    completed: int = 0
    utilization: float | None = None
    reply_p50_s: float | None = None
    reply_p95_s: float | None = None
    replies_done: int = 0
    replies_sent_in: int = 0
    jain: float | None = None
    per_owner: dict[str, int] = field(default_factory=dict)
    peak_window_requests: int = 0

    @property
    def retries_per_completed(self) -> float | None:
        return retry_rate(retries=self.retries, completed=self.completed)

    @property
    def rate_429(self) -> float | None:
        return ratio(self.provider_429s, self.provider_requests)


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


def start_sim(*, rpm: int, tpm: int, latency_ms: float, sigma: float = 0.0) -> Any:
    """llm_sim in this process: `latency_ms` +- half (sigma 0), or lognormal with that median."""
    from devtools.llm_sim import LLMSim

    shape: dict[str, float] = (
        {"latency_median_ms": latency_ms, "latency_sigma": sigma} if sigma > 0 else {"latency_ms": latency_ms}
    )
    sim = LLMSim(rpm=rpm, tpm=tpm, mode="window", seed=1, **shape)
    sim.start()
    return sim


@dataclass(frozen=True)
class Steady:
    """The steady window of a run: when it started (wall clock), how long it lasted, the
    requests the simulator admitted in it, and the replies sent in during the whole run."""

    from_wall: float
    seconds: float
    admitted: int
    replies: int

    def utilization(self, *, rpm: int) -> float | None:
        return utilization(used=self.admitted, limit_per_min=rpm, seconds=self.seconds)


def run_naive(
    *,
    seconds: float,
    rpm: int,
    tpm: int,
    workers: int,
    reply_every: float,
    rate_limit: str,
    latency_ms: int,
    load: Workload,
) -> ArmResult:
    import redis

    broker = redis_for(db=13)
    results = redis.Redis.from_url(broker)
    results.flushdb()
    sim = start_sim(rpm=rpm, tpm=tpm, latency_ms=latency_ms)
    # A plain Celery app, no Django: without DJANGO_SETTINGS_MODULE (this process's, or a test
    # run's), or Celery's Django fixup would load the product's settings into the workers.
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "NAIVE_BROKER": broker,
        "NAIVE_LLM_BASE_URL": sim.base_url,
        "NAIVE_RATE_LIMIT": rate_limit,
    }
    from devtools.processes import ProcessGroup

    group = ProcessGroup(log_dir=out_dir() / "naive-logs", env=env)
    for i in range(workers):
        group.start(
            f"naive{i}",
            [
                sys.executable,
                *("-m", "celery", "-A", "bench.naive_app", "worker", "-n", f"naive{i}@%h"),
                *("--concurrency", "1", "--loglevel", "WARNING", "--without-gossip", "--without-mingle"),
            ],
        )
    # naive_app reads its broker at import: this process must enqueue where the workers listen.
    os.environ["NAIVE_BROKER"] = broker
    from bench.naive_app import outreach

    try:
        now = time.time()
        for owner, n in load.assignments():
            for i in range(n):
                outreach.delay(f"{owner}-{i}", owner, "intro", now)
        steady = _drive(
            seconds=seconds,
            sim=sim,
            reply_every=reply_every,
            load=load,
            send_reply=lambda k: outreach.delay(f"reply-{k}", k % load.owners, "reply", time.time()),
            ready=lambda: bool(results.hlen("naive:done")),
        )
        done = [json.loads(v) for v in results.hgetall("naive:done").values()]
    finally:
        group.stop()
        stats = sim.stats()
        sim.stop()
    in_window = [d for d in done if d["done_at"] >= steady.from_wall]
    figures = naive_figures(done=done, retries=int(results.get("naive:retries") or 0))
    per_owner = {str(o): sum(1 for d in in_window if d["owner"] == o) for o in range(load.owners)}
    return _arm_result(
        name=f"plain Celery (rate_limit={rate_limit} per worker x {workers}, autoretry)",
        completed_per_min=per_minute(count=len(in_window), seconds=steady.seconds),
        stats=stats,
        figures=figures,
        utilization=steady.utilization(rpm=rpm),
        replies_sent_in=steady.replies,
        per_owner=per_owner,
    )


def _drive(
    *,
    seconds: float,
    sim: Any,
    reply_every: float,
    load: Workload,
    send_reply: Callable[[int], object],
    ready: Callable[[], bool],
) -> Steady:
    """Replies arrive every `reply_every` s; the steady window starts after the ramp."""
    if load.ready_timeout_s:
        first_wait(ready=ready, what="outreach done", timeout_s=load.ready_timeout_s)
    start, k = time.monotonic(), 0
    marked_at, marked_wall, base = start + load.ramp_s, 0.0, None
    while (elapsed := time.monotonic() - start) < seconds:
        if base is None and elapsed >= load.ramp_s:
            marked_at, marked_wall, base = time.monotonic(), time.time(), sim.stats()
        if elapsed >= k * reply_every:
            send_reply(k)
            k += 1
        time.sleep(0.2)
    stats = sim.stats()
    print(f"  ran {seconds:.0f}s; live window now {stats['window']}", flush=True)
    assert base is not None  # main() keeps --seconds beyond the ramp
    return Steady(
        from_wall=marked_wall,
        seconds=time.monotonic() - marked_at,
        admitted=stats["admitted"] - base["admitted"],
        replies=k,
    )


def run_product(
    *, seconds: float, rpm: int, tpm: int, reply_every: float, latency_ms: int, load: Workload
) -> ArmResult:
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
        REDIS_URL=redis_for(db=12),
        LLM_RPM=str(rpm),
        LLM_TPM=str(tpm),
        DISPATCH_INTERVAL="1",
        LOG_LEVEL=stack_log_level(),
    )
    django_start(env=env)
    owners = _seed_product(load=load)
    from devtools.processes import ProcessGroup, start_pipeline

    group = ProcessGroup(log_dir=out_dir() / "product-logs", env=env)
    start_pipeline(group)  # the Procfile's recipe (config.workers)
    try:
        steady = _drive(
            seconds=seconds,
            sim=sim,
            reply_every=reply_every,
            load=load,
            send_reply=lambda k: _reply(owners, k),
            ready=_product_ready,
        )
    finally:
        group.stop()
        stats = sim.stats()
        sim.stop()
        smtp.stop()
    return _product_result(stats=stats, steady=steady, rpm=rpm, started_at=started_at)


def _product_ready() -> bool:
    from outreach.models import Outreach, State

    return Outreach.objects.filter(state=State.SENT).exists()


def _seed_product(*, load: Workload) -> list[Any]:
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
        for o in range(load.owners)
    ]
    now = timezone.now()
    for owner_index, n in load.assignments():
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


def _product_result(*, stats: dict[str, Any], steady: Steady, rpm: int, started_at: datetime) -> ArmResult:
    from outreach.models import Outreach, State

    steady_from = datetime.fromtimestamp(steady.from_wall, tz=UTC)
    in_window = Outreach.objects.filter(state=State.SENT, sent_at__gte=steady_from)
    per_owner = {o.name.split()[-1]: in_window.filter(owner=o).count() for o in _owners()}
    figures = product_figures(since=started_at)
    return _arm_result(
        name="this product (dispatcher + shared budget + paced calls)",
        completed_per_min=per_minute(count=in_window.count(), seconds=steady.seconds),
        stats=stats,
        figures=figures,
        utilization=steady.utilization(rpm=rpm),
        replies_sent_in=steady.replies,
        per_owner=per_owner,
    )


def _arm_result(
    *,
    name: str,
    completed_per_min: float | None,
    stats: dict[str, Any],
    figures: RunFigures,
    utilization: float | None,
    replies_sent_in: int,
    per_owner: dict[str, int],
) -> ArmResult:
    """Both arms' row of the table, from the simulator's counters and the shared figures."""
    return ArmResult(
        name=name,
        completed_per_min=completed_per_min or 0.0,
        provider_429s=stats["rejected_429"],
        provider_requests=stats["requests"],
        retries=figures.retries,
        completed=figures.completed,
        utilization=utilization,
        reply_p50_s=_seconds(figures.reply.p50_s),
        reply_p95_s=_seconds(figures.reply.p95_s),
        replies_done=figures.reply.count,
        replies_sent_in=replies_sent_in,
        jain=jain_index(shares=per_owner.values()),
        per_owner=per_owner,
        peak_window_requests=stats["peak_window"]["requests"],
    )


def _owners() -> list[Any]:
    from outreach.models import Owner

    return list(Owner.objects.filter(organization__name="Bench").order_by("id"))


def report(results: list[ArmResult], *, rpm: int, seconds: float, load: Workload) -> None:
    out_dir().mkdir(parents=True, exist_ok=True)
    rows: list[tuple[str, Any]] = [
        ("completed outreach / min (steady)", lambda r: f"{r.completed_per_min:.1f}"),
        ("LLM utilization (steady, % of limit)", lambda r: _percent(r.utilization, places=1)),
        ("peak requests in any 60 s window", lambda r: f"{r.peak_window_requests} / {rpm}"),
        (
            "provider 429s (of requests)",
            lambda r: f"{r.provider_429s} of {r.provider_requests} ({_percent(r.rate_429, places=2)})",
        ),
        (
            "transient retries per completed job",
            lambda r: f"{_rate(r.retries_per_completed)} ({r.retries}/{r.completed})",
        ),
        (
            "reply latency p50 / p95 (s)",
            lambda r: f"{r.reply_p50_s} / {r.reply_p95_s} ({r.replies_done}/{r.replies_sent_in} done)",
        ),
        ("fairness across owners (Jain)", lambda r: _rate(r.jain)),
    ]
    width = max(len(label) for label, _ in rows)
    print(
        f"\nworkload: {load.big_owner_leads} + {load.small_owners}x{load.small_owner_leads} intros, replies during the run; "
        f"provider {rpm} rpm strict sliding window; {seconds:.0f}s per arm\n"
    )
    for i, r in enumerate(results):
        print(f"({chr(97 + i)}) {r.name}")
    print("\n" + " " * width + "".join(f"  {'(' + chr(97 + i) + ')':>36}" for i in range(len(results))))
    for label, get in rows:
        print(label.ljust(width) + "".join(f"  {get(r):>36}" for r in results))
    (out_dir() / "compare.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    _chart(results)
    print(f"\nwrote {out_dir() / 'compare.json'} and {out_dir() / 'compare.svg'}")


def _chart(results: list[ArmResult]) -> None:
    from orchestrator.metrics.charts import panels_chart, svg_document

    chart = panels_chart(
        chart_id="chart-compare",
        title="Plain Celery vs this product",
        labels=[f"({chr(97 + i)})" for i in range(len(results))],
        panels=[
            ("LLM utilization %", [100 * (r.utilization or 0.0) for r in results]),
            ("provider 429s", [float(r.provider_429s) for r in results]),
            ("reply latency p50 (s)", [r.reply_p50_s or 0.0 for r in results]),
            ("fairness (Jain)", [r.jain or 0.0 for r in results]),
        ],
    )
    (out_dir() / "compare.svg").write_text(svg_document(chart))


def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _percent(value: float | None, *, places: int) -> str:
    return "n/a" if value is None else f"{100 * value:.{places}f}%"


def smoke_problems(*, results: list[ArmResult]) -> list[str]:
    """What makes a smoke run broken: an arm that completed nothing in its steady window
    (no Jain's index: nothing was shared out) or sent no request to the provider."""
    problems = []
    for r in results:
        if r.jain is None or not r.provider_requests:
            problems.append(f"{r.name}: {sum(r.per_owner.values())} completed in the steady window")
    return problems


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
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    load = SMOKE if args.smoke else FULL
    if args.smoke:
        args.seconds, args.reply_every = 8, 2.0
    elif args.seconds < 90:
        parser.error("--seconds: at least 90 (the first minute is a ramp, excluded from steady figures)")
    if args.smoke:
        with smoke_stores():
            results = _arms(parser=parser, args=args, load=load)
        report(results, rpm=args.rpm, seconds=args.seconds, load=load)
        smoke_verdict(problems=smoke_problems(results=results))
    else:
        report(_arms(parser=parser, args=args, load=load), rpm=args.rpm, seconds=args.seconds, load=load)


def _arms(*, parser: argparse.ArgumentParser, args: argparse.Namespace, load: Workload) -> list[ArmResult]:
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
                    load=load,
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
                    load=load,
                )
            )
        else:
            parser.error(f"--arms: unknown arm {arm!r}; use naive and/or product")
    return results


if __name__ == "__main__":
    main()
