"""Several models and deployments at their limits: the Procfile stack against llm_sim.

    .venv/bin/python bench/models.py --mode split --duration 150   # small for plan+context, large for the message
    .venv/bin/python bench/models.py --mode pool --duration 150    # one model on two deployments, one fails
    .venv/bin/python bench/models.py --smoke [--mode pool]        # seconds (CI runs split)

split: one llm_sim serving `small` (--small-rpm, default 600) and `large` (--large-rpm, 120),
each with limits of its own (tokens never bind); LLM_DEPLOYMENTS names both, LLM_STEP_MODELS
puts plan and context on small and the message on large. Target: the large model at >= 97% of
its limit in the steady window, 429s <= 0.1%, the small model (2 calls a job, 240 of its 600)
never what holds the large one back.

pool: two llm_sim processes, each one deployment of `big` (--pool-rpm each, default 300), all
steps on `big`. Target: their combined limit used at >= 97% until --fail-at s; then the second
is restarted serving another model only (every call to it answers 404 model_not_found, a
configuration fault): its breaker must open and its work move to the first within a dispatch
interval, nothing dead-lettered.

The worker lines of the root Procfile run as written (bench/latency.py's stack: a private
redis-server, scratch PostgreSQL `outreach_bench_latency`, an SMTP sink), at --median-ms
provider latency. Writes var/bench/models-<mode>-<timestamp>.json and prints the figures.
Utilization, rates and shares are orchestrator.figures'.

--smoke: split unless --mode says pool, 200 ms calls, 3 owners; the clock starts when the first
outreach is sent (the workers' boot varies with the load) and runs 12 s, steady after 3 s (pool:
the failure at 6 s), on its own scratch database and redis-server. Exits 1 unless work was
sent, none went dead, and (split) the large model was used.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.latency import (
    DB_NAME,
    LINES,
    database_fresh,
    first_sent,
    http_json,
    seed,
    wait_healthy,
)
from bench.stack import (
    SMOKE_HELP,
    first_wait,
    out_dir,
    private_redis_django,
    production_env,
    smoke_stores,
    smoke_verdict,
)
from orchestrator.figures import per_minute, ratio, utilization

TPM = 100_000_000  # tokens never bind: the request limits are what is measured
SETTLE_S = 10.0  # pool: the survivor's figure starts this long after the failure (the breaker opens)


def sim_argv(*, port: int, models: list[tuple[str, int]], median_ms: float) -> list[str]:
    argv = [sys.executable, "manage.py", "llm_sim", "--port", str(port), "--rpm", "1", "--tpm", str(TPM)]
    for name, rpm in models:
        argv += ["--model", f"{name}:{rpm}:{TPM}"]
    return [*argv, "--latency-median-ms", str(median_ms), "--latency-sigma", "0.5", "--log-every", "0"]


def stack(*, deployments: list[dict[str, Any]], steps: str, sink_port: int, redis_url: str) -> dict[str, str]:
    from devtools.processes import stack_env

    return stack_env(
        llm_base_url=deployments[0]["base_url"],
        smtp_port=sink_port,
        DATABASE_URL=os.environ["DATABASE_URL"],
        REDIS_URL=redis_url,
        LLM_DEPLOYMENTS=json.dumps(deployments),
        LLM_STEP_MODELS=steps,
        **production_env(),
    )


def counts(stats: dict[str, Any], model: str) -> tuple[int, int]:
    row = stats["models"].get(model, {"admitted": 0, "rejected_429": 0})
    return int(row["admitted"]), int(row["rejected_429"])


def steady_window(
    samples: list[dict[str, Any]], key: str, *, start_s: float, end_s: float
) -> tuple[int, float]:
    """Admitted between the first sample at or after start_s and the last before end_s, and
    the seconds between them."""
    window = [s for s in samples if start_s <= s["t"] <= end_s]
    first, last = window[0], window[-1]
    return last[key] - first[key], last["t"] - first["t"]


def run(args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    import redis
    from django.db.models import Count

    from devtools.processes import ProcessGroup, free_port
    from devtools.procfile import procfile_argv
    from devtools.smtp_sink import SMTPSink
    from outreach.models import Outreach

    pool = args.mode == "pool"
    ports = [free_port(), free_port()] if pool else [free_port()]
    urls = [f"http://127.0.0.1:{p}/v1" for p in ports]
    if pool:
        deployments = [
            {"name": "big", "model": "big", "rpm": args.pool_rpm, "tpm": TPM, "base_url": u} for u in urls
        ]
        steps, jobs_per_min = "plan=big,context=big,message=big", 2 * args.pool_rpm / 3
        sims = [[("big", args.pool_rpm)], [("big", args.pool_rpm)]]
    else:
        deployments = [
            {"name": "small", "model": "small", "rpm": args.small_rpm, "tpm": TPM, "base_url": urls[0]},
            {"name": "large", "model": "large", "rpm": args.large_rpm, "tpm": TPM, "base_url": urls[0]},
        ]
        steps, jobs_per_min = (
            "plan=small,context=small,message=large",
            min(args.large_rpm, args.small_rpm / 2),
        )
        sims = [[("small", args.small_rpm), ("large", args.large_rpm)]]
    leads = math.ceil(1.5 * jobs_per_min * args.duration / 60) + 100
    database_fresh()
    sink = SMTPSink().start()
    logs = out_dir() / "models-logs" / args.mode
    env = stack(deployments=deployments, steps=steps, sink_port=sink.port, redis_url=redis_url)
    provider, workers = ProcessGroup(log_dir=logs, env=env), ProcessGroup(log_dir=logs, env=env)
    samples: list[dict[str, Any]] = []
    failed_at = breaker_open_at = serving_404_at = None
    r = redis.Redis.from_url(redis_url)
    try:
        for i, (port, models) in enumerate(zip(ports, sims, strict=True)):
            provider.start(f"llm_sim{i}", sim_argv(port=port, models=models, median_ms=args.median_ms))
        seed(owners=args.owners, leads=leads)
        for port in ports:
            wait_healthy(f"http://127.0.0.1:{port}/health")
        for name in LINES:
            workers.start(name, procfile_argv(name))
        if args.smoke:  # the clock starts once the stack sends: its boot time varies with the load
            first_wait(ready=first_sent, what="outreach sent")
        started = time.monotonic()
        while (t := time.monotonic() - started) < args.duration:
            if pool and failed_at is None and t >= args.fail_at:
                provider.kill("llm_sim1")
                provider.procs.pop("llm_sim1").wait(10)
                provider.start(
                    "llm_sim1b", sim_argv(port=ports[1], models=[("other", 10)], median_ms=args.median_ms)
                )
                failed_at = t  # killed now; it answers 404 once the new process is up
                wait_healthy(f"http://127.0.0.1:{ports[1]}/health")
                serving_404_at = time.monotonic() - started
                continue  # sample again with a fresh clock
            if (
                failed_at is not None
                and breaker_open_at is None
                and r.hexists("orchestrator:llm_fault:dep:big:1", "opened_ms")
            ):
                breaker_open_at = t
            stats = [http_json(f"http://127.0.0.1:{p}/stats") for p in ports]
            states = dict(Outreach.objects.values_list("state").annotate(n=Count("id")).order_by())
            sample: dict[str, Any] = {
                "t": round(t, 2),
                "sent": states.get("sent", 0),
                "dead": states.get("dead", 0),
            }
            for i, s in enumerate(stats):
                for model in s["models"]:
                    sample[f"{i}:{model}"], sample[f"{i}:{model}:429"] = counts(s, model)
                sample[f"{i}:unknown"] = s.get("unknown_model", 0)
            samples.append(sample)
            if int(t) % 10 == 0:
                print(f"  {t:5.0f}s  {sample}", flush=True)
            time.sleep(max(0.0, started + len(samples) - time.monotonic()))
    finally:
        workers.stop()
        provider.stop()
        sink.stop()
    result = figures(args=args, samples=samples, failed_at=failed_at, breaker_open_at=breaker_open_at)
    return {**result, "serving_404_at_s": serving_404_at, "samples": samples}


def figures(
    *,
    args: argparse.Namespace,
    samples: list[dict[str, Any]],
    failed_at: float | None,
    breaker_open_at: float | None,
) -> dict[str, Any]:
    last = samples[-1]
    if args.mode == "split":
        end = last["t"]
        large, seconds = steady_window(samples, "0:large", start_s=args.warmup, end_s=end)
        small, _ = steady_window(samples, "0:small", start_s=args.warmup, end_s=end)
        refused = last["0:large:429"] + last["0:small:429"]
        return {
            "large_utilization": utilization(used=large, limit_per_min=args.large_rpm, seconds=seconds),
            "small_utilization": utilization(used=small, limit_per_min=args.small_rpm, seconds=seconds),
            "large_per_min": per_minute(count=large, seconds=seconds),
            "small_per_min": per_minute(count=small, seconds=seconds),
            "share_429": ratio(refused, last["0:large"] + last["0:small"] + refused),
            "sent": last["sent"],
            "dead": last["dead"],
        }
    end = (failed_at or last["t"]) - 0.5  # the last sample before the failure
    both = [{**s, "both": s.get("0:big", 0) + s.get("1:big", 0)} for s in samples if "1:big" in s]
    combined, seconds = steady_window(both, "both", start_s=args.warmup, end_s=end)
    survivor = None
    if failed_at:
        after, after_s = steady_window(samples, "0:big", start_s=failed_at + SETTLE_S, end_s=last["t"])
        survivor = utilization(used=after, limit_per_min=args.pool_rpm, seconds=after_s)
    refused = last.get("0:big:429", 0) + max(s.get("1:big:429", 0) for s in samples)
    return {
        "combined_utilization_before_failure": utilization(
            used=combined, limit_per_min=2 * args.pool_rpm, seconds=seconds
        ),
        "combined_per_min": per_minute(count=combined, seconds=seconds),
        "survivor_utilization_after_failure": survivor,
        "failed_at_s": failed_at,
        "breaker_open_after_s": None
        if failed_at is None or breaker_open_at is None
        else breaker_open_at - failed_at,
        "not_found_404s": last.get("1:unknown", 0),
        "share_429": ratio(refused, last.get("0:big", 0) + max(s.get("1:big", 0) for s in samples) + refused),
        "sent": last["sent"],
        "dead": last["dead"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=("split", "pool"), help="required, but split with --smoke")
    parser.add_argument("--duration", type=float, default=150.0)
    parser.add_argument("--warmup", type=float, default=40.0, help="Seconds before the steady window.")
    parser.add_argument("--median-ms", type=float, default=300.0)
    parser.add_argument("--small-rpm", type=int, default=600)
    parser.add_argument("--large-rpm", type=int, default=120)
    parser.add_argument("--pool-rpm", type=int, default=300, help="Each deployment's requests/min.")
    parser.add_argument(
        "--fail-at", type=float, default=110.0, help="pool: when the second deployment fails."
    )
    parser.add_argument("--owners", type=int, default=20)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.mode = args.mode or "split"
        args.duration, args.warmup, args.fail_at, args.median_ms, args.owners = 12.0, 3.0, 6.0, 200.0, 3
        with smoke_stores():
            result = measure(args=args)
        smoke_verdict(problems=smoke_problems(result=result, mode=args.mode))
    elif args.mode is None:
        parser.error("--mode: required (split or pool)")
    else:
        measure(args=args)


def measure(*, args: argparse.Namespace) -> dict[str, Any]:
    with private_redis_django(db_name=DB_NAME) as redis_url:
        result = run(args, redis_url)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    out_dir().mkdir(parents=True, exist_ok=True)
    path = out_dir() / f"models-{args.mode}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps({"args": vars(args), "figures": result}, indent=1))
    print(f"wrote {path}")
    return result


def smoke_problems(*, result: dict[str, Any], mode: str) -> list[str]:
    """Broken, not slow: nothing sent, work gone dead, or (split) the large model never called."""
    problems = []
    if not result["sent"]:
        problems.append("nothing sent")
    if result["dead"]:
        problems.append(f"{result['dead']} outreach dead")
    if mode == "split" and not result["large_utilization"]:
        problems.append("the large model admitted nothing in the steady window")
    return problems


if __name__ == "__main__":
    main()
