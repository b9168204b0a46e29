"""Several models and deployments at their limits: the Procfile stack against llm_sim.

    .venv/bin/python bench/models.py --mode split --duration 150   # small for plan+context, large for the message
    .venv/bin/python bench/models.py --mode pool --duration 150    # one model on two deployments, one fails

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

from bench.latency import DB_NAME, LINES, database_fresh, http_json, seed, wait_healthy
from bench.stack import OUT, private_redis_django, production_env

TPM = 100_000_000  # tokens never bind: the request limits are what is measured


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


def steady_rate(samples: list[dict[str, Any]], key: str, *, start_s: float, end_s: float) -> float:
    """Admitted per minute between the first sample at or after start_s and the last before end_s."""
    window = [s for s in samples if start_s <= s["t"] <= end_s]
    first, last = window[0], window[-1]
    return (last[key] - first[key]) / ((last["t"] - first["t"]) / 60)


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
    logs = OUT / "models-logs" / args.mode
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
        large = steady_rate(samples, "0:large", start_s=args.warmup, end_s=end)
        small = steady_rate(samples, "0:small", start_s=args.warmup, end_s=end)
        refused = last["0:large:429"] + last["0:small:429"]
        return {
            "large_utilization": large / args.large_rpm,
            "small_utilization": small / args.small_rpm,
            "large_per_min": large,
            "small_per_min": small,
            "share_429": refused / max(1, last["0:large"] + last["0:small"] + refused),
            "sent": last["sent"],
            "dead": last["dead"],
        }
    end = (failed_at or last["t"]) - 0.5  # the last sample before the failure
    both = [{**s, "both": s.get("0:big", 0) + s.get("1:big", 0)} for s in samples if "1:big" in s]
    combined = steady_rate(both, "both", start_s=args.warmup, end_s=end)
    after = (
        steady_rate(samples, "0:big", start_s=(failed_at or 0) + 10, end_s=last["t"]) if failed_at else None
    )
    refused = last.get("0:big:429", 0) + max(s.get("1:big:429", 0) for s in samples)
    return {
        "combined_utilization_before_failure": combined / (2 * args.pool_rpm),
        "combined_per_min": combined,
        "survivor_utilization_after_failure": None if after is None else after / args.pool_rpm,
        "failed_at_s": failed_at,
        "breaker_open_after_s": None
        if failed_at is None or breaker_open_at is None
        else breaker_open_at - failed_at,
        "not_found_404s": last.get("1:unknown", 0),
        "share_429": refused
        / max(1, last.get("0:big", 0) + max(s.get("1:big", 0) for s in samples) + refused),
        "sent": last["sent"],
        "dead": last["dead"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mode", choices=("split", "pool"), required=True)
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
    args = parser.parse_args()
    with private_redis_django(db_name=DB_NAME) as redis_url:
        result = run(args, redis_url)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"models-{args.mode}-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps({"args": vars(args), "figures": result}, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
