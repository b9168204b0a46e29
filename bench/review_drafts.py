"""A seller whose drafts wait for review beside an autonomous agent: the seller's drafts stay within
its day, the agent gets the rest of the key (docs/dispatch.md, "Admission", rule 5).

    .venv/bin/python bench/review_drafts.py [--seconds 150] [--warmup 30] [--rpm 300] [--leads 400] [--limit 20]
    .venv/bin/python bench/review_drafts.py --smoke   # seconds, tiny sizes (CI)

The whole stack as the Procfile's recipe runs it (bench.stack, devtools.processes.start_pipeline),
against `llm_sim` at a realistic latency (lognormal, median --median-ms 3000, sigma --sigma 0.5)
whose request limit (--rpm, 300/min as the issue tried it) binds. Two owners with --leads intros
each: a human seller with review required and a daily limit of --limit, and an AI agent
without review and without a binding limit. Nobody reviews during the run, so every draft the
seller gets stays committed. Sampled twice a second from the start: the seller's drafts
(awaiting approval + approved) and everything it committed (drafts + in flight + sent today).
Measured after the warm-up: of the key's request limit, what the provider counted, and the
agent's share of the jobs written. Prints both and writes var/bench/review_drafts.json.

Targets: the seller's max committed drafts <= --limit; the key >= 97% used (by the agent, once
the seller's day is drafted).

--smoke: a seller limit of 5 and 30 intros each, 200 ms calls at 600 requests/min, measuring
8 s from 2 s after the first written job, on its own scratch stores; exits 1 when the seller
held more drafts than its limit or the agent got nothing written.
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

from bench.compare import start_sim
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
from orchestrator.figures import ratio, utilization

SAMPLE_S = 0.5


@dataclass
class Result:
    seller_limit: int
    seller_max_drafts: int
    seller_max_committed: int
    seller_written: int
    agent_written: int
    agent_share: float | None  # of the jobs written in the window
    minutes: float
    key_use: float | None  # of the key's request limit, what the provider counted
    provider_429s: int


def run(
    *,
    seconds: float,
    warmup: float,
    rpm: int,
    leads: int,
    limit: int,
    median_ms: float,
    sigma: float,
    smoke: bool,
) -> Result:
    database_url = scratch_database(name="outreach_bench_review_drafts")
    sim = start_sim(rpm=rpm, tpm=100_000_000, latency_ms=median_ms, sigma=sigma)
    from devtools.processes import ProcessGroup, stack_env, start_pipeline
    from devtools.smtp_sink import SMTPSink

    smtp = SMTPSink(keep_messages=False).start()
    settings = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_for(db=12),
        "LLM_RPM": str(rpm),
        "LLM_TPM": "100000000",
        "DISPATCH_INTERVAL": "1",
        "LOG_LEVEL": stack_log_level(),
    }
    env = stack_env(llm_base_url=sim.base_url, smtp_port=smtp.port, **settings)
    django_start(env=env)
    seller, agent = _seed(leads=leads, limit=limit)
    group = ProcessGroup(log_dir=out_dir() / "review-drafts-logs", env=env)
    sampler = _Sampler(seller=seller)
    start_pipeline(group)
    sampler.start()
    try:
        if smoke:  # the warm-up starts once the stack writes: its boot time varies with the load
            first_wait(ready=lambda: any(_written([seller, agent]).values()), what="job written")
        time.sleep(warmup)
        before, t0, sim0 = _written([seller, agent]), time.monotonic(), sim.stats()
        time.sleep(seconds)
        after, elapsed_s, sim1 = _written([seller, agent]), time.monotonic() - t0, sim.stats()
    finally:
        sampler.stop()
        group.stop()
        sim.stop()
        smtp.stop()
    from django.db import connections

    connections.close_all()
    seller_n, agent_n = (after[o.pk] - before[o.pk] for o in (seller, agent))
    return Result(
        seller_limit=limit,
        seller_max_drafts=sampler.max_drafts,
        seller_max_committed=sampler.max_committed,
        seller_written=after[seller.pk],
        agent_written=after[agent.pk],
        agent_share=ratio(agent_n, seller_n + agent_n),
        minutes=elapsed_s / 60,
        key_use=utilization(
            used=sim1.get("admitted", 0) - sim0.get("admitted", 0), limit_per_min=rpm, seconds=elapsed_s
        ),
        provider_429s=sim1.get("rejected_429", 0) - sim0.get("rejected_429", 0),
    )


class _Sampler:
    """The seller's drafts and commitments, sampled on a thread of its own for the whole run."""

    def __init__(self, *, seller: Any) -> None:
        self.seller, self.max_drafts, self.max_committed = seller, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        from django.db import connection
        from django.utils import timezone

        from orchestrator.dispatch.owner_limits import owner_rules
        from orchestrator.dispatch.reads import committed_today

        rules = owner_rules(self.seller)
        try:
            while not self._stop.wait(SAMPLE_S):
                c = committed_today(owners=[rules], now=timezone.now())[self.seller.pk]
                self.max_drafts = max(self.max_drafts, c.drafts)
                self.max_committed = max(self.max_committed, c.sent + c.in_flight + c.drafts)
        finally:
            connection.close()


def _seed(*, leads: int, limit: int) -> tuple[Any, Any]:
    """A seller (review, `limit` a day) and an agent (no review), `leads` intros queued each."""
    from datetime import time as dtime

    from django.utils import timezone

    from outreach.models import Lead, Outreach
    from outreach.services.owners import OwnerSpec, owner_upsert

    specs = (
        OwnerSpec(
            "seller", "human", limit, dtime(0), dtime(0), "UTC", review_required=True, working_days="1234567"
        ),
        OwnerSpec(
            "agent",
            "agent",
            1_000_000,
            dtime(0),
            dtime(0),
            "UTC",
            review_required=False,
            working_days="1234567",
        ),
    )
    owners = [owner_upsert(spec=spec)[0] for spec in specs]
    now = timezone.now()
    for owner in owners:
        made = Lead.objects.bulk_create(
            bench_lead(owner=owner, n=f"{owner.name}-{i}", domain="bench.example") for i in range(leads)
        )
        Outreach.objects.bulk_create(bench_intro(lead=lead, now=now) for lead in made)
    return owners[0], owners[1]


def _written(owners: list[Any]) -> dict[int, int]:
    """Per owner: jobs written so far (a draft, or an email on its way out)."""
    from django.db.models import Count

    from outreach.models import Outreach

    rows = dict(
        Outreach.objects.filter(owner__in=owners, tokens_used__gt=0)
        .values_list("owner_id")
        .annotate(n=Count("id"))
        .values_list("owner_id", "n")
    )
    return {o.pk: rows.get(o.pk, 0) for o in owners}


def report(r: Result) -> None:
    out_dir().mkdir(parents=True, exist_ok=True)
    share = "n/a" if r.agent_share is None else f"{r.agent_share:.1%}"
    key = "n/a" if r.key_use is None else f"{r.key_use:.1%}"
    print(
        f"\nseller (review required, limit {r.seller_limit}): max committed drafts {r.seller_max_drafts} "
        f"(target <= {r.seller_limit}), max committed {r.seller_max_committed}, written {r.seller_written}\n"
        f"agent: written {r.agent_written}; {share} of the jobs written in the {r.minutes:.1f} min measured\n"
        f"key utilization: {key} of the request limit counted by the provider (target >= 97%), "
        f"{r.provider_429s} 429s"
    )
    (out_dir() / "review_drafts.json").write_text(json.dumps(asdict(r), indent=2))


def smoke_problems(*, result: Result) -> list[str]:
    problems = []
    if result.seller_max_drafts > result.seller_limit:
        problems.append(
            f"the seller held {result.seller_max_drafts} drafts, over its limit {result.seller_limit}"
        )
    if not result.agent_written:
        problems.append("the agent got no job written")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=150)
    parser.add_argument("--warmup", type=float, default=30)
    parser.add_argument("--rpm", type=int, default=300, help="the key's request limit (default 300/min)")
    parser.add_argument("--leads", type=int, default=400, help="intros queued per owner (default 400)")
    parser.add_argument("--limit", type=int, default=20, help="the seller's daily limit (default 20)")
    parser.add_argument("--median-ms", type=float, default=3000.0, help="LLM latency median (default 3000)")
    parser.add_argument("--sigma", type=float, default=0.5, help="lognormal sigma; 0: fixed +- half")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    for name in ("seconds", "rpm", "leads", "limit", "median_ms"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.smoke:
        args.seconds, args.warmup, args.median_ms, args.sigma, args.rpm = 8.0, 2.0, 200.0, 0.0, 600
        args.leads, args.limit = 30, 5
    options = {
        "seconds": args.seconds,
        "warmup": args.warmup,
        "rpm": args.rpm,
        "leads": args.leads,
        "limit": args.limit,
        "median_ms": args.median_ms,
        "sigma": args.sigma,
        "smoke": args.smoke,
    }
    if args.smoke:
        with smoke_stores():
            result = run(**options)
        report(result)
        smoke_verdict(problems=smoke_problems(result=result))
    else:
        report(run(**options))


if __name__ == "__main__":
    main()
