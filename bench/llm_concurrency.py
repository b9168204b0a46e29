"""Many slow LLM calls in one process: the threads pool's way against an asyncio client (run by hand).

    .venv/bin/python bench/llm_concurrency.py [--calls 200] [--latency-ms 3000] [--rounds 0]
    .venv/bin/python bench/llm_concurrency.py --smoke   # 20 calls of 200 ms each way (CI)

Starts llm_sim (limits far above the load, `--latency-ms` mean, no jitter), then in a fresh
interpreter per mode, with Django set up as in a worker, makes `--calls` chat completions at
once and prints wall time, CPU seconds (user + system) and peak RSS; with `--rounds R`, each of
those calls is followed by R more from the same thread or coroutine, and the CPU they take is
printed per call (`steady_cpu_ms_per_call`: connections open, as in a worker that has run a
while):
- threads: one OS thread per call through the product's client (nurture.writing.llm.chat: plain
  JSON over one shared httpx2 connection pool), as a `--pool threads` generation worker runs;
- asyncio: one coroutine per call through openai.AsyncOpenAI on one event loop.
Figures and the choice they support: docs/benchmarks.md.

--smoke makes 20 calls of 200 ms each way and exits 1 unless every call answered, in both.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MESSAGES = [{"role": "user", "content": "Write one short sales email."}]


def _measure(mode: str, *, calls: int, rounds: int, base_url: str) -> dict[str, float]:
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DJANGO_DEBUG="1",
        LLM_BASE_URL=base_url,
        LLM_MAX_CONNECTIONS=str(calls),
    )
    import django

    django.setup()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cpu_before = _cpu_s()
    started = time.monotonic()
    steady: list[float] = []  # CPU seconds when the first calls had all answered, then at the end
    if mode == "threads":
        ok = _threads(calls, rounds=rounds, steady=steady)
    else:
        ok = _asyncio(calls, rounds=rounds, base_url=base_url, steady=steady)
    return {
        "calls": calls,
        "ok": ok,
        "steady_cpu_ms_per_call": round(1000 * (_cpu_s() - steady[0]) / (calls * rounds), 2) if rounds else 0,
        "wall_s": round(time.monotonic() - started, 2),
        "cpu_s": round(_cpu_s() - cpu_before, 2),
        "rss_before_mb": round(rss_before, 1),
        "rss_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def _threads(calls: int, *, rounds: int, steady: list[float]) -> int:
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from nurture.writing import llm

    first_answered = threading.Barrier(calls, action=lambda: steady.append(_cpu_s()))

    def one(_: int) -> int:
        ok = bool(llm.chat(messages=MESSAGES, max_tokens=200).text)  # type: ignore[arg-type]
        first_answered.wait()
        for _ in range(rounds):
            ok = ok and bool(llm.chat(messages=MESSAGES, max_tokens=200).text)  # type: ignore[arg-type]
        return int(ok)

    with ThreadPoolExecutor(max_workers=calls) as pool:
        return sum(pool.map(one, range(calls)))


def _asyncio(calls: int, *, rounds: int, base_url: str, steady: list[float]) -> int:
    import asyncio

    import httpx2
    import openai

    async def run() -> int:
        limits = httpx2.Limits(max_connections=calls, max_keepalive_connections=calls)
        client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key="sk-demo",
            max_retries=0,
            timeout=60,
            http_client=openai.DefaultAsyncHttpxClient(limits=limits, timeout=60),
        )

        async def one() -> bool:
            result = await client.chat.completions.create(model="sim-1", messages=MESSAGES, max_tokens=200)  # type: ignore[arg-type]
            return bool(result.choices[0].message.content)

        async def more() -> bool:
            return all([await one() for _ in range(rounds)])

        done = await asyncio.gather(*(one() for _ in range(calls)))
        steady.append(_cpu_s())
        if rounds:
            done = [
                ok and again
                for ok, again in zip(done, await asyncio.gather(*(more() for _ in range(calls))), strict=True)
            ]
        await client.close()
        return sum(done)

    return asyncio.run(run())


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--latency-ms", type=float, default=3000)
    parser.add_argument(
        "--rounds", type=int, default=0, help="calls after the first, per thread or coroutine"
    )
    parser.add_argument("--mode", choices=["threads", "asyncio"], help=argparse.SUPPRESS)
    parser.add_argument("--base-url", help=argparse.SUPPRESS)
    parser.add_argument("--smoke", action="store_true", help="20 calls of 200 ms; exit 1 if any failed")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.mode:  # the child: one measurement
        print(json.dumps(_measure(args.mode, calls=args.calls, rounds=args.rounds, base_url=args.base_url)))
        return
    if args.smoke:
        args.calls, args.latency_ms, args.rounds = 20, 200.0, 1
    from bench.stack import smoke_verdict

    results = _compare(calls=args.calls, rounds=args.rounds, latency_ms=args.latency_ms)
    if args.smoke:
        smoke_verdict(
            problems=[
                f"{mode}: {r['ok']:.0f} of {args.calls} calls answered"
                for mode, r in results.items()
                if r["ok"] != args.calls
            ]
        )


def _wait_healthy(url: str, *, timeout_s: float = 60.0) -> None:
    """Until llm_sim answers (it boots Django first: seconds on a loaded machine)."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _compare(*, calls: int, rounds: int, latency_ms: float) -> dict[str, dict[str, float]]:
    """Start llm_sim, measure each mode in a fresh interpreter; mode -> its figures."""
    from bench.stack import llm_sim_argv
    from devtools.processes import free_port

    port = free_port()
    sim = subprocess.Popen(
        llm_sim_argv(
            port=port, rpm=1_000_000, tpm=1_000_000_000, latency_ms=latency_ms, jitter_ms=0, log_every=0
        ),
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    results = {}
    try:
        _wait_healthy(f"http://127.0.0.1:{port}/health")
        for mode in ("threads", "asyncio"):
            child = [
                sys.executable,
                __file__,
                "--mode",
                mode,
                "--calls",
                str(calls),
                "--rounds",
                str(rounds),
                "--base-url",
                f"http://127.0.0.1:{port}/v1",
            ]
            out = subprocess.run(child, cwd=ROOT, capture_output=True, text=True, check=True).stdout
            print(mode, out.strip().splitlines()[-1], flush=True)
            results[mode] = json.loads(out.strip().splitlines()[-1])
    finally:
        sim.terminate()
        sim.wait(10)
    return results


if __name__ == "__main__":
    main()
