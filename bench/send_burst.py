"""A burst of approvals against the send budget: does mail leave at the configured rate?

    .venv/bin/python bench/send_burst.py                              # 5,000 drafts at 20/s
    .venv/bin/python bench/send_burst.py --drafts 1000 --rate 10      # a quick look
    .venv/bin/python bench/send_burst.py --smoke                      # seconds (CI)

--drafts written drafts of --owners sellers (review required) in --domains organizations, each
sending from its own domain, are approved at once (nurture.review.drafts_approve, what the
admin's bulk action calls) before any worker starts. Then the Procfile's orchestrator, send and
beat lines run exactly as written, with EMAIL_RATE_PER_SECOND=--rate and
EMAIL_DOMAIN_DAILY_LIMIT=--domain-daily (and EMAIL_RATE_MARGIN_MS=--margin-ms), against an SMTP sink in this process, a scratch
PostgreSQL database (outreach_bench_send_burst, dropped and created) and a private
redis-server. Every fourth owner has a daily limit of --owner-daily, the others --drafts; with
the defaults (10 owners of 500 drafts, 2 domains) owners 0, 4 and 8 stop at their limit and
both domains at their day's cap: the run checks both kinds of cap as well as the rate.

The run ends when, after the first email, nothing is in flight and nothing was sent for
--quiet-s (the rest wait for tomorrow: an owner's limit or a domain's day), or after --timeout-s. Figures, from the sink's
arrival times (time.time() at DATA):
- rate: (arrivals - 1) / (last - first) (figures.event_rate), against the configured rate and the strict bucket's
  (maths.send_bucket: 20/s keeps at 18.98/s; with the default 200 ms margin, 15.82/s);
- most in any 1 s window (must be <= --rate) and in any 60 s window (figures.most_in_window);
- sent per owner and per domain against their caps (must be <=); what the waiting rows say.

Writes var/bench/send-burst-<timestamp>.json and prints the figures.

--smoke: 60 drafts of 4 owners in 2 domains at 10/s, every fourth owner's limit 5, each
domain's day 20 (both kinds of cap bind), done after 3 quiet seconds, on its own scratch
database and redis-server. Exits 1 unless mail left, no email twice, no cap exceeded, no
second over the rate and no Procfile line died.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.stack import (
    SMOKE_HELP,
    bench_intro,
    bench_lead,
    database_for,
    out_dir,
    private_redis_django,
    send_lines_run,
    smoke_stores,
    smoke_verdict,
)
from orchestrator.figures import event_rate, most_in_window, window_counts

DB_NAME = "outreach_bench_send_burst"


def seed(*, args: argparse.Namespace) -> dict[str, Any]:
    """Organizations (one sender domain each), owners, leads and written drafts awaiting
    approval; returns the caps each owner and domain must respect."""
    from datetime import time as dtime

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from outreach.models import Lead, Organization, Outreach, State
    from outreach.services.owners import OwnerSpec, owner_upsert

    owners, limits = [], {}
    for o in range(args.owners):
        org_name = f"Burst {o % args.domains}"
        limit = args.owner_daily if o % 4 == 0 else args.drafts
        owner = owner_upsert(
            spec=OwnerSpec(
                f"burst seller {o}",
                "human",
                limit,
                dtime(0),
                dtime(0),
                "UTC",
                review_required=True,
                working_days="1234567",
                organization=org_name,
            )
        )[0]
        Organization.objects.filter(name=org_name).update(sender_email=f"sales@d{o % args.domains}.example")
        owners.append(owner)
        limits[owner.pk] = limit
    now = timezone.now()
    for start in range(0, args.drafts, 1000):
        leads = Lead.objects.bulk_create(
            bench_lead(owner=owners[i % args.owners], n=i, domain="prospect.example")
            for i in range(start, min(args.drafts, start + 1000))
        )
        Outreach.objects.bulk_create(
            bench_intro(
                lead=lead,
                now=now,
                state=State.AWAITING_APPROVAL,
                draft_subject="A quick question",
                draft_body="Hello Pat, a short body for the benchmark.",
            )
            for lead in leads
        )
    reviewer = get_user_model().objects.create_user(username="burst-reviewer", password="x", is_staff=True)
    return {"owner_limits": limits, "reviewer": reviewer}


def approve_all(*, reviewer: Any) -> float:
    """Approve every draft as the admin's bulk action does; seconds it took."""
    from nurture.review import drafts_approve
    from outreach.models import Outreach, State

    started = time.monotonic()
    drafts_approve(drafts=Outreach.objects.filter(state=State.AWAITING_APPROVAL).order_by("id"), by=reviewer)
    return time.monotonic() - started


def wait_done(*, sink: Any, workers: Any, args: argparse.Namespace) -> list[str]:
    """Until, after the first arrival (the workers take a while to start on a busy machine),
    nothing is in flight and nothing arrived for --quiet-s; or --timeout-s."""
    from outreach.models import Outreach, State

    started, last_count, last_change = time.monotonic(), 0, time.monotonic()
    while time.monotonic() - started < args.timeout_s:
        count = len(sink.received_at)
        if count != last_count:
            last_count, last_change = count, time.monotonic()
            print(f"  t={time.monotonic() - started:6.1f}s sent {count}", flush=True)
        in_flight = Outreach.objects.filter(state__in=[State.DISPATCHED, State.SENDING]).exists()
        if count and not in_flight and time.monotonic() - last_change > args.quiet_s:
            break
        if dead := workers.dead():
            return dead
        time.sleep(1.0)
    return []


def figures(*, sink: Any, caps: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from django.db.models import Count

    from orchestrator.budget import SendRules
    from outreach.models import Outreach, State

    times = list(sink.received_at)
    sent_by_owner = dict(
        Outreach.objects.filter(state=State.SENT).values_list("owner_id").annotate(n=Count("id"))
    )
    sent_by_domain = dict(
        Outreach.objects.filter(state=State.SENT)
        .values_list("lead__organization__sender_email")
        .annotate(n=Count("id"))
    )
    waiting = Counter(Outreach.objects.filter(state=State.APPROVED).values_list("blocked_reason", flat=True))
    over_owner = {o: n for o, n in sent_by_owner.items() if n > caps["owner_limits"][o]}
    over_domain = {d: n for d, n in sent_by_domain.items() if n > args.domain_daily}
    _, by_message_id = sink.snapshot()
    return {
        "arrivals": len(times),
        "duplicates": sum(1 for n in by_message_id.values() if n > 1),
        "span_s": round(max(times) - min(times), 2) if times else None,
        "rate_per_s": round(event_rate(times=times) or 0, 3),
        "configured_per_s": args.rate,
        "strict_per_s": round(SendRules(per_second=args.rate, margin_ms=args.margin_ms).rate_per_s or 0, 3),
        "margin_ms": args.margin_ms,
        "most_in_1s": most_in_window(times=times, window_s=1.0),
        "most_in_60s": most_in_window(times=times, window_s=60.0),
        # windows (one per arrival starting it) holding more than the rate
        "windows_over_rate": sum(1 for n in window_counts(times=times, window_s=1.0) if n > args.rate),
        "sent_by_domain": sent_by_domain,
        "domain_cap": args.domain_daily,
        "domains_over_cap": over_domain,
        "sent_by_owner": {str(o): n for o, n in sorted(sent_by_owner.items())},
        "owner_limits": {str(o): n for o, n in sorted(caps["owner_limits"].items())},
        "owners_over_limit": over_owner,
        "still_approved_by_reason": dict(waiting.most_common()),
    }


def run(*, args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connections

    from devtools.smtp_sink import SMTPSink

    connections.close_all()
    database_for(name=DB_NAME)
    call_command("migrate", verbosity=0)
    caps = seed(args=args)
    approve_s = approve_all(reviewer=caps["reviewer"])
    print(f"approved {args.drafts} drafts in {approve_s:.1f}s", flush=True)
    sink = SMTPSink(keep_messages=False).start()
    dead = send_lines_run(
        logs="send-burst-logs",
        sink=sink,
        redis_url=redis_url,
        wait=lambda workers: wait_done(sink=sink, workers=workers, args=args),
        EMAIL_RATE_PER_SECOND=str(args.rate),
        EMAIL_DOMAIN_DAILY_LIMIT=str(args.domain_daily),
        EMAIL_RATE_MARGIN_MS=str(args.margin_ms),
    )
    result = figures(sink=sink, caps=caps, args=args)
    return {"approve_s": round(approve_s, 1), "dead_processes": dead, **result}


def main() -> None:
    args = arguments()
    if args.smoke:
        with smoke_stores():
            result = measure(args=args)
        smoke_verdict(problems=smoke_problems(result=result, rate=args.rate))
    else:
        measure(args=args)


def measure(*, args: argparse.Namespace) -> dict[str, Any]:
    with private_redis_django(db_name=DB_NAME) as redis_url:
        result = run(args=args, redis_url=redis_url)
    print(json.dumps(result, indent=1))
    out_dir().mkdir(parents=True, exist_ok=True)
    path = out_dir() / f"send-burst-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps({"args": vars(args), "result": result}, indent=1, default=str))
    print(f"\nwrote {path}; process logs in {out_dir() / 'send-burst-logs'}")
    return result


def smoke_problems(*, result: dict[str, Any], rate: int) -> list[str]:
    """Broken, not slow: no mail left, an email twice, a cap or the rate not held, a line died."""
    checks = [
        (result["arrivals"] > 0, "no email arrived"),
        (not result["duplicates"], f"{result['duplicates']} emails arrived twice"),
        (not result["owners_over_limit"], f"owners over their limit: {result['owners_over_limit']}"),
        (not result["domains_over_cap"], f"domains over their cap: {result['domains_over_cap']}"),
        (result["most_in_1s"] <= rate, f"{result['most_in_1s']} emails in one second, rate {rate}"),
        (not result["dead_processes"], f"died: {result['dead_processes']}"),
    ]
    return [problem for ok, problem in checks if not ok]


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--drafts", type=int, default=5_000)
    parser.add_argument("--owners", type=int, default=10)
    parser.add_argument("--domains", type=int, default=2)
    parser.add_argument("--rate", type=int, default=20, help="EMAIL_RATE_PER_SECOND (default 20).")
    parser.add_argument("--margin-ms", type=int, default=200, help="EMAIL_RATE_MARGIN_MS (default 200).")
    parser.add_argument(
        "--domain-daily", type=int, default=1_800, help="EMAIL_DOMAIN_DAILY_LIMIT (default 1,800)."
    )
    parser.add_argument(
        "--owner-daily", type=int, default=300, help="Daily limit of every fourth owner (default 300)."
    )
    parser.add_argument("--quiet-s", type=float, default=15.0)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.drafts, args.owners, args.domains, args.rate = 60, 4, 2, 10
        args.domain_daily, args.owner_daily, args.quiet_s, args.timeout_s = 20, 5, 3.0, 120.0
    return args


if __name__ == "__main__":
    main()
