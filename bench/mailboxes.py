"""Mailboxes under the real send workers: are each mailbox's day, warm-up step and spacing held,
and a recipient domain's day?

    .venv/bin/python bench/mailboxes.py              # 10 mailboxes, 2 domains, about 4 min
    .venv/bin/python bench/mailboxes.py --smoke      # seconds (CI)

One organization with two verified domains (m0.example, m1.example) and --owners owners (5),
each with two mailboxes, one per domain: 10 mailboxes. Half of them are on day 1 of their
warm-up, half on day 10 (`ramp_from` nine days ago): with --ramp-start 3 and --ramp-step 2,
day 1 allows 3 emails, day 10 min(--daily-cap, 21). Every mailbox spaces its sends at random
between --min-spacing and --max-spacing seconds. The organization caps each recipient domain
at --recipient-cap a day, and every fourth lead is at bigco.example. Each owner has --drafts
written drafts (review required), approved at once as the admin's bulk action does, then the
Procfile's orchestrator, send and beat lines run exactly as written against an SMTP sink in
this process, a scratch PostgreSQL database (outreach_bench_mailboxes) and a private
redis-server.

The run ends when nothing arrived for --quiet-s (longer than the longest spacing) after the
first email, or after --timeout-s. Figures, from the sink's arrival times (time.time() at DATA)
and From addresses, per mailbox: its warm-up day, emails sent against its cap today, the
smallest gap between two of its arrivals against its configured minimum; emails to bigco.example
against the cap; what the waiting rows say. Exits 1 when a mailbox sent more than its cap
today, two of its emails arrived closer than its minimum spacing less --tolerance-s (1 s: held
to the second), bigco.example got more than its cap, an email arrived twice, or a line died.

--smoke: 5 owners, 10 mailboxes, day 1 allows 1 email, day 10 min(4, 10) = 4, spacing 1-1.5 s,
bigco.example capped at 3, 12 drafts per owner; done after 4 quiet seconds.

Writes var/bench/mailboxes-<timestamp>.json and prints the figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from email.utils import parseaddr
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

DB_NAME = "outreach_bench_mailboxes"
BIG = "bigco.example"


def seed(*, args: argparse.Namespace) -> dict[str, Any]:
    """The organization, its domains, owners, mailboxes, leads and drafts awaiting approval;
    returns each mailbox's terms."""
    from datetime import time as dtime

    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from outreach.models import Lead, Mailbox, Organization, Outreach, State, VerifiedDomain
    from outreach.services.owners import OwnerSpec, owner_upsert

    org_name = "Mailbox bench"
    owners = [
        owner_upsert(
            spec=OwnerSpec(
                f"mailbox seller {o}",
                "human",
                10_000,
                dtime(0),
                dtime(0),
                "UTC",
                review_required=True,
                working_days="1234567",
                organization=org_name,
            )
        )[0]
        for o in range(args.owners)
    ]
    org = Organization.objects.get(name=org_name)
    Organization.objects.filter(pk=org.pk).update(
        sender_email="team@m0.example", recipient_domain_daily_cap=args.recipient_cap
    )
    for d in range(2):
        VerifiedDomain.objects.create(organization=org, domain=f"m{d}.example")
    today = timezone.now().date()
    terms = {}
    for o, owner in enumerate(owners):
        for d in range(2):
            warm_day = 1 if (o + d) % 2 == 0 else 10  # half on day 1, half on day 10, both domains
            box = Mailbox.objects.create(
                organization=org,
                address=f"seller{o}@m{d}.example",
                daily_cap=args.daily_cap,
                ramp_from=today - timedelta(days=warm_day - 1),
                ramp_start=args.ramp_start,
                ramp_step=args.ramp_step,
                min_spacing_s=args.min_spacing,
                max_spacing_s=args.max_spacing,
            )
            box.owners.add(owner)
            cap = min(args.daily_cap, args.ramp_start + args.ramp_step * (warm_day - 1))
            terms[box.address] = {"warm_up_day": warm_day, "cap": cap, "min_spacing_s": args.min_spacing}
    now = timezone.now()
    n = 0
    for owner in owners:
        leads = []
        for _ in range(args.drafts):
            domain = BIG if n % 4 == 0 else f"p{n}.example"
            leads.append(bench_lead(owner=owner, n=n, domain=domain))
            n += 1
        Outreach.objects.bulk_create(
            bench_intro(
                lead=lead,
                now=now,
                state=State.AWAITING_APPROVAL,
                draft_subject="A quick question",
                draft_body="Hello Pat, a short body for the benchmark.",
            )
            for lead in Lead.objects.bulk_create(leads)
        )
    reviewer = get_user_model().objects.create_user(username="mailbox-reviewer", password="x", is_staff=True)
    from nurture.review import drafts_approve

    drafts_approve(drafts=Outreach.objects.filter(state=State.AWAITING_APPROVAL).order_by("id"), by=reviewer)
    return terms


def wait_done(*, sink: Any, workers: Any, args: argparse.Namespace) -> list[str]:
    """Until nothing arrived for --quiet-s after the first email, or --timeout-s."""
    started, last_count, last_change = time.monotonic(), 0, time.monotonic()
    while time.monotonic() - started < args.timeout_s:
        count = len(sink.received_at)
        if count != last_count:
            last_count, last_change = count, time.monotonic()
            print(f"  t={time.monotonic() - started:6.1f}s sent {count}", flush=True)
        if count and time.monotonic() - last_change > args.quiet_s:
            break
        if dead := workers.dead():
            return dead
        time.sleep(0.5)
    return []


def figures(*, sink: Any, terms: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    from outreach.models import Outreach, State

    arrivals: dict[str, list[float]] = defaultdict(list)
    to_big = 0
    for message, at in zip(sink.messages, sink.received_at, strict=True):
        arrivals[parseaddr(message.mail_from)[1] or message.mail_from].append(at)
        to_big += any(r.lower().endswith("@" + BIG) for r in message.rcpt_tos)
    boxes = {}
    for address, t in sorted(terms.items()):
        times = sorted(arrivals.get(address, []))
        gaps = [b - a for a, b in itertools.pairwise(times)]
        boxes[address] = {
            **t,
            "sent": len(times),
            "min_gap_s": round(min(gaps), 3) if gaps else None,
        }
    waiting = Counter(
        r.split(":")[0]
        for r in Outreach.objects.filter(state=State.APPROVED).values_list("blocked_reason", flat=True)
    )
    _, by_message_id = sink.snapshot()
    return {
        "arrivals": len(sink.received_at),
        "duplicates": sum(1 for n in by_message_id.values() if n > 1),
        "strangers": sorted(set(arrivals) - set(terms)),
        "mailboxes": boxes,
        "to_bigco": to_big,
        "recipient_cap": args.recipient_cap,
        "still_approved_by_reason": dict(waiting.most_common()),
    }


def problems_of(*, result: dict[str, Any], tolerance_s: float) -> list[str]:
    """A cap or the spacing not held, bigco over its cap, an email twice, a line died."""
    found = []
    for address, box in result["mailboxes"].items():
        if box["sent"] > box["cap"]:
            found.append(f"{address} sent {box['sent']} > its cap {box['cap']}")
        if box["min_gap_s"] is not None and box["min_gap_s"] < box["min_spacing_s"] - tolerance_s:
            found.append(f"{address}: two emails {box['min_gap_s']}s apart < {box['min_spacing_s']}s")
    if result["to_bigco"] > result["recipient_cap"]:
        found.append(f"{BIG} got {result['to_bigco']} > its cap {result['recipient_cap']}")
    if result["duplicates"]:
        found.append(f"{result['duplicates']} emails arrived twice")
    if result["strangers"]:
        found.append(f"sent from outside the mailboxes: {result['strangers']}")
    if not result["arrivals"]:
        found.append("no email arrived")
    if result["dead_processes"]:
        found.append(f"died: {result['dead_processes']}")
    return found


def run(*, args: argparse.Namespace, redis_url: str) -> dict[str, Any]:
    from django.core.management import call_command
    from django.db import connections

    from devtools.smtp_sink import SMTPSink

    connections.close_all()
    database_for(name=DB_NAME)
    call_command("migrate", verbosity=0)
    terms = seed(args=args)
    sink = SMTPSink().start()
    dead = send_lines_run(
        logs="mailboxes-logs",
        sink=sink,
        redis_url=redis_url,
        wait=lambda workers: wait_done(sink=sink, workers=workers, args=args),
    )
    return {"dead_processes": dead, **figures(sink=sink, terms=terms, args=args)}


def report(result: dict[str, Any]) -> None:
    print(f"\n{'mailbox':24} {'day':>4} {'sent':>5} {'cap':>4} {'min gap s':>10} {'min spacing s':>14}")
    for address, box in result["mailboxes"].items():
        gap = "-" if box["min_gap_s"] is None else f"{box['min_gap_s']:.2f}"
        print(
            f"{address:24} {box['warm_up_day']:>4} {box['sent']:>5} {box['cap']:>4} {gap:>10} {box['min_spacing_s']:>14}"
        )
    print(f"to {BIG}: {result['to_bigco']} (cap {result['recipient_cap']}/day)")
    print(f"still approved, by reason: {result['still_approved_by_reason']}")


def measure(*, args: argparse.Namespace) -> dict[str, Any]:
    with private_redis_django(db_name=DB_NAME) as redis_url:
        result = run(args=args, redis_url=redis_url)
    report(result)
    out_dir().mkdir(parents=True, exist_ok=True)
    path = out_dir() / f"mailboxes-{datetime.now(UTC):%Y%m%dT%H%M%SZ}.json"
    path.write_text(json.dumps({"args": vars(args), "result": result}, indent=1, default=str))
    print(f"\nwrote {path}; process logs in {out_dir() / 'mailboxes-logs'}")
    return result


def main() -> None:
    args = arguments()
    if args.smoke:
        with smoke_stores():
            result = measure(args=args)
        smoke_verdict(problems=problems_of(result=result, tolerance_s=args.tolerance_s))
    else:
        result = measure(args=args)
        problems = problems_of(result=result, tolerance_s=args.tolerance_s)
        print("result: " + ("PASS" if not problems else "FAIL: " + "; ".join(problems)))
        if problems:
            raise SystemExit(1)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--owners", type=int, default=5, help="Owners, two mailboxes each (default 5: 10).")
    parser.add_argument("--drafts", type=int, default=40, help="Approved drafts per owner (default 40).")
    parser.add_argument("--daily-cap", type=int, default=40)
    parser.add_argument("--ramp-start", type=int, default=3)
    parser.add_argument("--ramp-step", type=int, default=2)
    parser.add_argument("--min-spacing", type=int, default=4, help="Seconds (default 4).")
    parser.add_argument("--max-spacing", type=int, default=8, help="Seconds (default 8).")
    parser.add_argument(
        "--recipient-cap", type=int, default=25, help="Emails to bigco.example a day (default 25)."
    )
    parser.add_argument("--tolerance-s", type=float, default=1.0, help="Spacing held to this (default 1 s).")
    parser.add_argument("--quiet-s", type=float, default=20.0)
    parser.add_argument("--timeout-s", type=float, default=600.0)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.drafts, args.daily_cap, args.ramp_start, args.ramp_step = 12, 4, 1, 1
        args.min_spacing, args.max_spacing, args.recipient_cap = 1, 2, 3
        args.quiet_s, args.timeout_s = 5.0, 150.0
    return args


if __name__ == "__main__":
    main()
