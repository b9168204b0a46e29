"""Owners whose jobs differ in tokens share the LLM budget: DISPATCH_FAIRNESS=tokens beside count.

    .venv/bin/python bench/fairness.py [--seconds 180] [--warmup 60] [--tpm 80000] [--long-body 3250] [--arms tokens,count]
    .venv/bin/python bench/fairness.py --median-ms 200 --sigma 0   # the earlier short-latency run
    .venv/bin/python bench/fairness.py --set LLM_EST_TOKENS_PER_CALL=1600  # try a setting
    .venv/bin/python bench/fairness.py --smoke   # the tokens arm, seconds (CI)

The whole stack as the Procfile's recipe runs it (bench.stack, devtools.processes.start_pipeline),
against `llm_sim` (usage proportional to the prompt, chars / 4; latency lognormal, median
--median-ms 3000, sigma --sigma 0.5, as a real model writes) whose token limit binds. Four
owners with deep reply backlogs: two answer short inbound emails, two long ones (the inbound
body enters every prompt of the job), so the second pair's jobs cost about three times the
tokens. Measured after the warm-up (the owners' estimates are learned by then): the tokens each
owner's finished jobs used (`Outreach.tokens_used`), Jain's index of those token shares, and the
emails each got, the dispatches the worker's pacer handed back, and how much of the key's token
limit the provider counted. Prints a table and writes var/bench/fairness.json. Jain's index and
the key's utilization are orchestrator.figures'.

--smoke runs the tokens arm (--arms to choose) with a backlog of 20 per owner, 200 ms calls and
400,000 tokens/min, measuring 8 s from 2 s after the first written job, on its own scratch stores, and exits 1
unless every owner got jobs written in the window (a Jain's index of their tokens).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.compare import start_sim
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
from orchestrator.figures import jain_index, per_minute, ratio, utilization

OWNERS = 4  # owners 0 and 1 short inbound emails, 2 and 3 long ones
BACKLOG, SMOKE_BACKLOG = 200, 20  # replies queued per owner: more than a run can write
SHORT_BODY = "Tell me more."


@dataclass
class ArmResult:
    fairness: str
    jain_tokens: float | None
    jain_emails: float | None
    tokens: dict[str, int]
    emails: dict[str, int]
    tokens_per_email: dict[str, float]
    minutes: float
    # Dispatches handed back by the worker's pacer ("provider window full"), per owner: each
    # spent its owner's turn and wrote nothing.
    dispatched: dict[str, int]
    paced_back: dict[str, int]
    # Of the key's token limit, what the provider counted (prompt + max_tokens a call), and 429s.
    key_use: float | None
    provider_429s: int


def run_arm(
    *,
    fairness: str,
    seconds: float,
    warmup: float,
    tpm: int,
    long_body: int,
    median_ms: float,
    sigma: float,
    overrides: dict[str, str],
    backlog: int = BACKLOG,
    smoke: bool = False,
) -> ArmResult:
    database_url = scratch_database(name="outreach_bench_fairness")
    sim = start_sim(rpm=6_000, tpm=tpm, latency_ms=median_ms, sigma=sigma)
    from devtools.processes import ProcessGroup, stack_env, start_pipeline
    from devtools.smtp_sink import SMTPSink

    smtp = SMTPSink(keep_messages=False).start()
    settings = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_for(db=12),
        "LLM_RPM": "6000",
        "LLM_TPM": str(tpm),
        "DISPATCH_INTERVAL": "1",
        "DISPATCH_FAIRNESS": fairness,
        "LOG_LEVEL": stack_log_level(),
    }
    env = stack_env(llm_base_url=sim.base_url, smtp_port=smtp.port, **(settings | overrides))
    django_start(env=env)
    owners = _seed(long_body=long_body, backlog=backlog)
    group = ProcessGroup(log_dir=out_dir() / f"fairness-{fairness}-logs", env=env)
    start_pipeline(group)
    try:
        if smoke:  # the warm-up starts once the stack writes: its boot time varies with the load
            first_wait(ready=lambda: any(jobs for _, jobs in _used(owners).values()), what="job written")
        time.sleep(warmup)
        before, t0, since, sim0 = _used(owners), time.monotonic(), _now(), sim.stats()
        time.sleep(seconds)
        after, elapsed_s, sim1 = _used(owners), time.monotonic() - t0, sim.stats()
        dispatched, paced_back = _handed_back(owners, since=since)
    finally:
        group.stop()
        sim.stop()
        smtp.stop()
    from django.db import connections

    connections.close_all()  # the next arm drops and re-creates the database
    tokens = {name: after[name][0] - before[name][0] for name in after}
    emails = {name: after[name][1] - before[name][1] for name in after}
    return ArmResult(
        fairness=fairness,
        jain_tokens=jain_index(shares=tokens.values()),
        jain_emails=jain_index(shares=emails.values()),
        tokens=tokens,
        emails=emails,
        tokens_per_email={n: round(ratio(tokens[n], emails[n]) or 0.0, 1) for n in tokens},
        minutes=elapsed_s / 60,
        dispatched=dispatched,
        paced_back=paced_back,
        key_use=utilization(
            used=sim1.get("tokens", 0) - sim0.get("tokens", 0), limit_per_min=tpm, seconds=elapsed_s
        ),
        provider_429s=sim1.get("rejected_429", 0) - sim0.get("rejected_429", 0),
    )


def _now() -> Any:
    from django.utils import timezone

    return timezone.now()


def _handed_back(owners: list[Any], *, since: Any) -> tuple[dict[str, int], dict[str, int]]:
    """Per owner, since `since`: dispatches to generation, and those the worker's pacer put back."""
    from django.db.models import Count, Q

    from outreach.models import OutreachEvent, State

    rows = (
        OutreachEvent.objects.filter(outreach__owner__in=owners, at__gte=since)
        .values("outreach__owner__name")
        .annotate(
            dispatched=Count("id", filter=Q(from_state=State.QUEUED, to_state=State.DISPATCHED)),
            paced=Count("id", filter=Q(to_state=State.QUEUED, note__contains="provider window full")),
        )
    )
    found = {r["outreach__owner__name"]: (r["dispatched"], r["paced"]) for r in rows}
    return (
        {o.name: found.get(o.name, (0, 0))[0] for o in owners},
        {o.name: found.get(o.name, (0, 0))[1] for o in owners},
    )


def _seed(*, long_body: int, backlog: int) -> list[Any]:
    """Owners with an intro each lead already had and a backlog of replies to answer."""
    from datetime import time as dtime

    from outreach.idempotency import reply_key
    from outreach.models import Lead, Outreach
    from outreach.services.owners import OwnerSpec, owner_upsert
    from outreach.services.queue import outreach_enqueue

    owners = []
    for o in range(OWNERS):
        spec = OwnerSpec(f"owner {o}", "agent", 100_000, dtime(0), dtime(0), "UTC", working_days="1234567")
        owner = owner_upsert(spec=spec)[0]
        owners.append(owner)
        body = SHORT_BODY if o < OWNERS // 2 else ("Here is what we run today. " * long_body)[:long_body]
        leads = Lead.objects.bulk_create(
            bench_lead(owner=owner, n=f"{o}-{i}", domain="bench.example") for i in range(backlog)
        )
        for i, lead in enumerate(leads):
            outreach_enqueue(
                lead=lead,
                kind=Outreach.Kind.REPLY,
                idempotency_key=reply_key(message_id=f"<bench-{o}-{i}@bench.example>"),
                context={"inbound": {"subject": "Re: hello", "body": body}},
            )
    return owners


def _used(owners: list[Any]) -> dict[str, tuple[int, int]]:
    """Per owner: tokens of its written jobs so far, and how many."""
    from django.db.models import Count, Sum

    from outreach.models import Outreach

    rows = (
        Outreach.objects.filter(owner__in=owners, tokens_used__gt=0)
        .values("owner__name")
        .annotate(tokens=Sum("tokens_used"), jobs=Count("id"))
    )
    found = {r["owner__name"]: (int(r["tokens"]), int(r["jobs"])) for r in rows}
    return {o.name: found.get(o.name, (0, 0)) for o in owners}


def report(results: list[ArmResult]) -> None:
    out_dir().mkdir(parents=True, exist_ok=True)
    for r in results:
        print(
            f"\nDISPATCH_FAIRNESS={r.fairness} ({r.minutes:.1f} min measured): "
            f"Jain(tokens) {_figure(r.jain_tokens)}, Jain(emails) {_figure(r.jain_emails)}"
        )
        for name in r.tokens:
            print(
                f"  {name}: {r.tokens[name]:>8} tokens  {r.emails[name]:>4} emails  "
                f"{r.tokens_per_email[name]:>7} tokens/email  "
                f"{r.paced_back[name]:>3} of {r.dispatched[name]:>3} dispatches put back by the pacer"
            )
        print(
            f"  tokens used: {per_minute(count=sum(r.tokens.values()), seconds=60 * r.minutes) or 0:,.0f}/min; the key's token limit "
            f"counted at {_figure(r.key_use, percent=True)} (prompt + max_tokens a call), {r.provider_429s} 429s"
        )
    (out_dir() / "fairness.json").write_text(json.dumps([asdict(r) for r in results], indent=2))


def _figure(value: float | None, *, percent: bool = False) -> str:
    if value is None:
        return "n/a"
    return f"{value:.1%}" if percent else f"{value:.4f}"


def smoke_problems(*, results: list[ArmResult]) -> list[str]:
    """Broken, not slow: an owner with no job written in the window (the stack stalled or
    starved someone outright), or no Jain's index at all."""
    return [
        f"DISPATCH_FAIRNESS={r.fairness}: jobs written per owner {r.emails}"
        for r in results
        if r.jain_tokens is None or not all(r.emails.values())
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=180)
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--tpm", type=int, default=80_000)
    parser.add_argument(
        "--long-body", type=int, default=3_250, help="chars of the long owners' inbound email"
    )
    parser.add_argument("--arms", default="tokens,count")
    parser.add_argument("--median-ms", type=float, default=3000.0, help="LLM latency median (default 3000)")
    parser.add_argument(
        "--sigma", type=float, default=0.5, help="lognormal sigma; 0: fixed +- half (default 0.5)"
    )
    parser.add_argument(
        "--set", action="append", default=[], metavar="NAME=VALUE", help="A setting for the workers."
    )
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if not all("=" in setting for setting in args.set):
        parser.error("--set: NAME=VALUE")
    if args.smoke:
        # Five times the key: in seconds every owner gets jobs written (tokens still share it).
        args.seconds, args.warmup, args.median_ms, args.sigma, args.tpm = 8.0, 2.0, 200.0, 0.0, 400_000
        args.arms = "tokens" if args.arms == parser.get_default("arms") else args.arms
        with smoke_stores():
            results = _arms(args=args, backlog=SMOKE_BACKLOG)
        report(results)
        smoke_verdict(problems=smoke_problems(results=results))
    else:
        report(_arms(args=args, backlog=BACKLOG))


def _arms(*, args: argparse.Namespace, backlog: int) -> list[ArmResult]:
    return [
        run_arm(
            fairness=arm,
            seconds=args.seconds,
            warmup=args.warmup,
            tpm=args.tpm,
            long_body=args.long_body,
            median_ms=args.median_ms,
            sigma=args.sigma,
            overrides=dict(setting.split("=", 1) for setting in args.set),
            backlog=backlog,
            smoke=args.smoke,
        )
        for arm in args.arms.split(",")
    ]


if __name__ == "__main__":
    main()
