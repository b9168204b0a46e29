"""A key that binds on tokens, long replies arriving among short intros: how much of its token
limit the provider counts, how many calls it answers 429, how evenly owners share it.

    .venv/bin/python bench/tokens_binding.py [--seconds 180] [--warmup 60] [--tpm 150000] [--replies 40] [--long-body 3250]
    .venv/bin/python bench/tokens_binding.py --foreign-share 0.3   # beside another client taking 30% of the key
    .venv/bin/python bench/tokens_binding.py --set LLM_EST_TOKENS_PER_CALL=1600   # try a setting
    .venv/bin/python bench/tokens_binding.py --smoke   # seconds, tiny sizes (CI)

The whole stack as the Procfile's recipe runs it (bench.stack, devtools.processes.start_pipeline),
against `llm_sim` (window mode; usage proportional to the prompt, chars / 4; latency lognormal,
median --median-ms 3000, sigma --sigma 0.5) with 6,000 requests/min, so its --tpm binds. Four
owners, each with a backlog of short intros; --replies long replies (an inbound email of
--long-body characters enters every prompt of the job, several times an intro's tokens) arrive
evenly over the warm-up and the measurement, round robin over the owners, each on a lead of
its own. --foreign-share F: another client on the key (llm_sim --shared-rps) asking for F of
its tokens in 2,000-token requests.

Measured after the warm-up (the owners' per-step estimates are learned by then): the share of
the key's token limit the provider counted (this product's and the other client's), the share
of what the other client left that this product counted, the 429s it answered this product,
and Jain's index of the tokens each owner's finished jobs used (`Outreach.tokens_used`).
Issue 27's targets: >= 97% of the limit counted, 0 answered 429, Jain >= 0.99; beside a client
taking 30%: >= 97% of what it leaves, under 1% answered 429. Prints them, and where the key
went (the provider's window and the budget's state sampled each second: the other client's
window and our estimate of it, the safety gap, our pacer's limit, our window), and writes
var/bench/tokens_binding.json and the samples to var/bench/tokens_binding-trace.json. Uses only bench.stack, bench.fairness and llm_sim, so the file
alone runs on an older checkout for a "before" figure.

--smoke: 20 intros per owner, 4 replies, 200 ms calls, 300,000 tokens/min (still binding),
10 s measured from 2 s after the first written job, on its own scratch stores; exits 1 unless
every owner got jobs written in the window and the provider answered no call 429.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.fairness import _figure, _used
from bench.stack import (
    SMOKE_HELP,
    bench_intro,
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
from orchestrator.figures import jain_index, ratio, utilization

OWNERS = 4
BACKLOG, SMOKE_BACKLOG = 300, 20  # intros queued per owner: more than a run can write
RPM = 6_000  # far above what the tokens admit: tokens bind
FOREIGN_TOKENS = 2_000  # tokens each of the other client's requests counts


@dataclass
class Result:
    tpm: int
    foreign_share: float
    minutes: float
    key_use: float | None  # of the limit, what the provider counted: ours and the other client's
    own_use: float | None  # of the limit, ours alone
    of_what_is_left: float | None  # ours / (limit - the other client's)
    requests: int
    answered_429: int
    share_429: float | None
    jain_tokens: float | None
    tokens: dict[str, int]
    emails: dict[str, int]
    replies_arrived: int
    # Where the key went (means over the measurement, sampled each second): the other client's
    # tokens in the provider's window and our estimate of them, the safety gap a 429 opened, the
    # limit our pacer held, our tokens in the provider's window, and the pacer's margin.
    trace: dict[str, float | None]


def run(
    *,
    seconds: float,
    warmup: float,
    tpm: int,
    replies: int,
    long_body: int,
    median_ms: float,
    sigma: float,
    foreign_share: float,
    overrides: dict[str, str],
    backlog: int,
    smoke: bool,
) -> Result:
    from devtools.llm_sim import LLMSim
    from devtools.processes import ProcessGroup, stack_env, start_pipeline
    from devtools.smtp_sink import SMTPSink

    database_url = scratch_database(name="outreach_bench_tokens_binding")
    shape: dict[str, float] = (
        {"latency_median_ms": median_ms, "latency_sigma": sigma} if sigma > 0 else {"latency_ms": median_ms}
    )
    shared_rps = foreign_share * tpm / 60 / FOREIGN_TOKENS
    sim = LLMSim(
        rpm=RPM, tpm=tpm, mode="window", seed=1, shared_rps=shared_rps, shared_tokens=FOREIGN_TOKENS, **shape
    )
    sim.start()
    smtp = SMTPSink(keep_messages=False).start()
    settings = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_for(db=12),
        "LLM_RPM": str(RPM),
        "LLM_TPM": str(tpm),
        "DISPATCH_INTERVAL": "1",
        "LOG_LEVEL": stack_log_level(),
    }
    env = stack_env(llm_base_url=sim.base_url, smtp_port=smtp.port, **(settings | overrides))
    django_start(env=env)
    owners = _seed(backlog=backlog)
    group = ProcessGroup(log_dir=out_dir() / "tokens_binding-logs", env=env)
    start_pipeline(group)
    arrived = 0
    try:
        if smoke:  # the warm-up starts once the stack writes: its boot time varies with the load
            first_wait(ready=lambda: any(jobs for _, jobs in _used(owners).values()), what="job written")
        every_s, started = (warmup + seconds) / max(replies, 1), time.monotonic()

        def arrive_until(t: float) -> None:
            nonlocal arrived
            while time.monotonic() - started < t:
                if arrived < replies and time.monotonic() - started >= arrived * every_s:
                    _reply_arrives(owner=owners[arrived % OWNERS], n=arrived, long_body=long_body)
                    arrived += 1
                time.sleep(0.05)

        arrive_until(warmup)
        before, t0, sim0 = _used(owners), time.monotonic(), sim.stats()
        tracer = Tracer(sim=sim, redis_url=settings["REDIS_URL"])
        tracer.start()
        arrive_until(warmup + seconds)
        after, elapsed_s, sim1 = _used(owners), time.monotonic() - t0, sim.stats()
        tracer.stop()
        out_dir().mkdir(parents=True, exist_ok=True)
        (out_dir() / "tokens_binding-trace.json").write_text(json.dumps(tracer.samples))
    finally:
        group.stop()
        sim.stop()
        smtp.stop()
    from django.db import connections

    connections.close_all()
    own = sim1.get("tokens", 0) - sim0.get("tokens", 0)
    foreign = sim1["shared"]["tokens"] - sim0["shared"]["tokens"]
    requests = sim1.get("requests", 0) - sim0.get("requests", 0)
    refused = sim1.get("rejected_429", 0) - sim0.get("rejected_429", 0)
    tokens = {name: after[name][0] - before[name][0] for name in after}
    return Result(
        tpm=tpm,
        foreign_share=foreign_share,
        minutes=elapsed_s / 60,
        key_use=utilization(used=own + foreign, limit_per_min=tpm, seconds=elapsed_s),
        own_use=utilization(used=own, limit_per_min=tpm, seconds=elapsed_s),
        of_what_is_left=ratio(own, tpm * elapsed_s / 60 - foreign),
        requests=requests,
        answered_429=refused,
        share_429=ratio(refused, requests),
        jain_tokens=jain_index(shares=tokens.values()),
        tokens=tokens,
        emails={name: after[name][1] - before[name][1] for name in after},
        replies_arrived=arrived,
        trace=tracer.means(tpm=tpm, foreign_tokens=FOREIGN_TOKENS),
    )


class Tracer:
    """Samples, once a second, the provider's window (llm_sim) and the budget's state for the
    provider's scope (its rate hash in Redis): what `report` breaks the key down into."""

    def __init__(self, *, sim: Any, redis_url: str) -> None:
        import redis

        self._sim, self._redis = sim, redis.Redis.from_url(redis_url, decode_responses=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.samples: list[dict[str, float]] = []

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        from django.db import connection

        try:
            while not self._stop.wait(1.0):
                self.samples.append(self._sample())
        finally:
            connection.close()

    def _sample(self) -> dict[str, float]:
        from django.db.models import Count

        from outreach.models import Outreach, State

        stats = self._sim.stats()
        rate: dict[str, float] = {  # every field but the provider's last headers (JSON) is a number
            str(k): float(v)
            for k, v in self._redis.hgetall("{llmbudget}:rate:provider").items()
            if k != "report"
        }
        # The token bucket reservations draw from (units of 1/60000 token): its level shows
        # whether dispatch waits on it (near 0) or refunds are clipped at its capacity.
        bucket = self._redis.hmget("{llmbudget}:bucket:provider", "t", "ts")
        jobs = dict(
            Outreach.objects.filter(state__in=(State.DISPATCHED, State.GENERATING))
            .values_list("state")
            .annotate(n=Count("id"))
            .order_by()
        )
        seconds, micros = self._redis.time()
        return {
            "t": time.monotonic(),
            "now_ms": seconds * 1000 + micros / 1000,
            "window": float(stats["window"]["tokens"]),
            "shared_admitted": float(stats["shared"]["admitted"]),
            "dispatched": float(jobs.get(State.DISPATCHED, 0)),
            "generating": float(jobs.get(State.GENERATING, 0)),
            "bucket_t": float(bucket[0]) / 60000 if bucket[0] is not None else -1.0,
            "bucket_ts": float(bucket[1]) if bucket[1] is not None else -1.0,
            **rate,
        }

    @staticmethod
    def _gap(sample: dict[str, float], *, tpm: int) -> float:
        """The safety gap in force: as a 429 last set it, closing by a tolerance an interval."""
        from orchestrator.budget.values import Adaptive

        if "safe_t" not in sample:
            return 0.0
        adaptive = Adaptive()
        closed = adaptive.tolerance(tpm) * (sample["now_ms"] - sample["safe_ms_t"]) / adaptive.interval_ms
        return max(0.0, sample["safe_t"] - closed)

    def means(self, *, tpm: int, foreign_tokens: int) -> dict[str, float | None]:
        """Means over the samples a window after the first (the other client's window needs
        60 s of its admissions)."""
        import statistics

        rows = []
        for s in self.samples:
            past = [p for p in self.samples if p["t"] <= s["t"] - 60]
            if not past:
                continue
            foreign = (s["shared_admitted"] - past[-1]["shared_admitted"]) * foreign_tokens
            rows.append((s, foreign))

        def mean(values: list[float]) -> float | None:
            return statistics.fmean(values) if values else None

        return {
            "samples": float(len(rows)),
            "other_client_window": mean([f for _, f in rows]),
            "our_estimate_of_it": mean([s["foreign_t"] / 1000 for s, _ in rows if "foreign_t" in s]),
            "safety_gap": mean([self._gap(s, tpm=tpm) for s, _ in rows]),
            "our_limit": mean([s["base_t"] for s, _ in rows if "base_t" in s]),
            "our_window": mean([s["window"] - f for s, f in rows]),
            "spread_ms": mean([s["spread"] for s, _ in rows if "spread" in s]),
        }


def _seed(*, backlog: int) -> list[Any]:
    """Owners with a backlog of intros, due now."""
    from datetime import time as dtime

    from django.utils import timezone

    from outreach.models import Lead, Outreach
    from outreach.services.owners import OwnerSpec, owner_upsert

    owners = []
    for o in range(OWNERS):
        spec = OwnerSpec(f"owner {o}", "agent", 100_000, dtime(0), dtime(0), "UTC", working_days="1234567")
        owner = owner_upsert(spec=spec)[0]
        owners.append(owner)
        leads = Lead.objects.bulk_create(
            bench_lead(owner=owner, n=f"{o}-{i}", domain="bench.example") for i in range(backlog)
        )
        now = timezone.now()
        Outreach.objects.bulk_create(bench_intro(lead=lead, now=now) for lead in leads)
    return owners


def _reply_arrives(*, owner: Any, n: int, long_body: int) -> None:
    """A long inbound email from a lead of `owner`'s: a reply to write, ahead of every intro."""
    from outreach.idempotency import reply_key
    from outreach.models import Outreach
    from outreach.services.queue import outreach_enqueue

    lead = bench_lead(owner=owner, n=f"r{n}", domain="replies.example")
    lead.save()
    body = ("Here is what we run today, and what we would need from you. " * long_body)[:long_body]
    outreach_enqueue(
        lead=lead,
        kind=Outreach.Kind.REPLY,
        idempotency_key=reply_key(message_id=f"<bench-reply-{n}@replies.example>"),
        context={"inbound": {"subject": "Re: hello", "body": body}},
    )


def report(result: Result) -> None:
    r = result
    print(
        f"\ntokens binding: {r.tpm:,} tokens/min, {r.minutes:.1f} min measured, "
        f"{r.replies_arrived} long replies arrived, other client asking {r.foreign_share:.0%} of the key"
    )
    for name in r.tokens:
        print(f"  {name}: {r.tokens[name]:>8} tokens  {r.emails[name]:>4} emails")
    print(f"  the key's token limit counted by the provider  {_figure(r.key_use, percent=True)}")
    if r.foreign_share:
        print(f"  ours, of what the other client left            {_figure(r.of_what_is_left, percent=True)}")
    print(
        f"  answered 429                                   {r.answered_429} of {r.requests} requests "
        f"({_figure(r.share_429, percent=True)})"
    )
    print(f"  Jain's index of token shares across owners     {_figure(r.jain_tokens)}")
    t = r.trace
    if t.get("samples"):
        print(f"  where the key went (means of {t['samples']:.0f} samples a second, a window into the run):")
        for label, key in (
            ("the other client's tokens in the window", "other_client_window"),
            ("our estimate of them", "our_estimate_of_it"),
            ("the safety gap after 429s", "safety_gap"),
            ("the limit our pacer held", "our_limit"),
            ("our tokens in the provider's window", "our_window"),
        ):
            value = t.get(key)
            print(f"    {label:<40} {'n/a' if value is None else f'{value:>9,.0f}'}")
        spread = t.get("spread_ms")
        print(
            f"    {'measured spread (margin = 2x + floor)':<40} {'n/a' if spread is None else f'{spread:>9,.0f} ms'}"
        )
    out_dir().mkdir(parents=True, exist_ok=True)
    (out_dir() / "tokens_binding.json").write_text(json.dumps(asdict(r), indent=2))


def smoke_problems(*, result: Result) -> list[str]:
    """Broken, not slow: an owner with no job written in the window, or a call answered 429
    (the budget let more than the key's tokens through)."""
    problems = []
    if result.jain_tokens is None or not all(result.emails.values()):
        problems.append(f"jobs written per owner {result.emails}")
    if result.answered_429:
        problems.append(f"{result.answered_429} calls answered 429")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--tpm", type=int, default=150_000)
    parser.add_argument("--replies", type=int, default=40, help="long replies arriving over the run")
    parser.add_argument("--long-body", type=int, default=3_250, help="chars of a reply's inbound email")
    parser.add_argument("--median-ms", type=float, default=3000.0, help="LLM latency median (default 3000)")
    parser.add_argument("--sigma", type=float, default=0.5, help="lognormal sigma; 0: fixed +- half")
    parser.add_argument(
        "--foreign-share",
        type=float,
        default=0.0,
        help="share (0-1) of the key's tokens another client asks for",
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="A setting for the workers."
    )
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if not all("=" in setting for setting in args.set):
        parser.error("--set: NAME=VALUE")
    if not 0 <= args.foreign_share < 1:
        parser.error(f"--foreign-share: must be in [0, 1), got {args.foreign_share}")
    for flag, value in (("--tpm", args.tpm), ("--seconds", args.seconds), ("--long-body", args.long_body)):
        if value <= 0:
            parser.error(f"{flag}: must be positive, got {value}")
    if args.replies < 0 or args.warmup < 0:
        parser.error("--replies and --warmup: must not be negative")
    backlog = BACKLOG
    if args.smoke:
        args.seconds, args.warmup, args.median_ms, args.sigma, args.tpm = 10.0, 2.0, 200.0, 0.0, 300_000
        args.replies, backlog = 4, SMOKE_BACKLOG
    kwargs: dict[str, Any] = {
        "seconds": args.seconds,
        "warmup": args.warmup,
        "tpm": args.tpm,
        "replies": args.replies,
        "long_body": args.long_body,
        "median_ms": args.median_ms,
        "sigma": args.sigma,
        "foreign_share": args.foreign_share,
        "overrides": dict(setting.split("=", 1) for setting in args.set),
        "backlog": backlog,
        "smoke": args.smoke,
    }
    if args.smoke:
        with smoke_stores():
            result = run(**kwargs)
        report(result)
        smoke_verdict(problems=smoke_problems(result=result))
    else:
        report(run(**kwargs))


if __name__ == "__main__":
    main()
