"""Dispatch cycle time and rate against queue depth, on PostgreSQL, budget unlimited.

    .venv/bin/python bench/dispatch.py [--depths 1000,10000,100000,1000000] [--owners 1000] [--slots 500]
    .venv/bin/python bench/dispatch.py --history 0,100000,1000000 [--depths 10000]

For each depth it fills a scratch database (outreach_bench) with that many QUEUED intro rows
spread over the owners, runs warm-up cycles, then times cycles of `slots` picks (select,
reserve, claim, enqueue to Redis db 14), putting the claimed rows back to QUEUED between cycles
(untimed) so the depth stays constant. Prints median/p95 cycle time and outreach dispatched/s.

With --history, the depth stays fixed and what grows is the day's history instead: that many
rows already SENT today (each moved through the in-flight states first, as the pipeline does,
so the partial indexes carry the same dead entries), the owners' daily limits unlimited. The
cycle should not notice: the daily-limit check reads one count per owner, not the sent rows.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.stack import database_for, django_env, django_start, redis_for
from orchestrator.figures import percentile


def _fill(*, depth: int, owners: int) -> None:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE outreach_outreachevent, outreach_outreach, outreach_lead, outreach_owner, outreach_organization CASCADE"
        )
        cur.execute(
            "INSERT INTO outreach_organization (name, allowed_link_domains, sender_email, created_at) VALUES ('bench', '', '', now()) RETURNING id"
        )
        org = cur.fetchone()[0]
        cur.execute(
            """INSERT INTO outreach_owner (organization_id, name, kind, daily_limit, hours_start, hours_end, working_days,
                   timezone, review_required, weight, active, created_at)
               SELECT %s, 'owner ' || g, 'agent', 1000000, '00:00', '00:00', '1234567', 'UTC', false, 1, true, now()
               FROM generate_series(1, %s) g""",
            [org, owners],
        )
        cur.execute(
            """INSERT INTO outreach_lead (organization_id, owner_id, email, first_name, last_name, company, title, timezone, status, created_at)
               SELECT %s, o.id, 'lead' || o.id || '@bench.example', 'B', 'L', 'C', 'T', 'UTC', 'active', now() FROM outreach_owner o""",
            [org],
        )
        cur.execute(
            """INSERT INTO outreach_outreach (lead_id, owner_id, kind, tier, state, not_before, idempotency_key, step, context,
                   attempts, last_error, error_class, blocked_reason, reservation_id, draft_subject, draft_body, sent_at,
                   message_id, in_reply_to, tokens_used, llm_calls, created_at, updated_at, state_changed_at)
               SELECT l.id, l.owner_id, 'intro', 2, 'queued', now() - interval '1 hour' + (g * interval '1 ms'), 'bench:' || g, 0,
                   '{}', 0, '', '', '', '', '', '', NULL, '', '', 0, 0, now(), now(), now()
               FROM generate_series(1, %s) g JOIN outreach_lead l ON l.id = (SELECT min(id) FROM outreach_lead) + (g %% %s)""",
            [depth, owners],
        )
        cur.execute("ANALYZE")


def _add_sent_history(*, rows: int, owners: int) -> None:
    """`rows` outreach sent today, spread over the owners, with their per-owner daily counts."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            """INSERT INTO outreach_outreach (lead_id, owner_id, kind, tier, state, not_before, idempotency_key, step, context,
                   attempts, last_error, error_class, blocked_reason, reservation_id, draft_subject, draft_body, sent_at,
                   message_id, in_reply_to, tokens_used, llm_calls, created_at, updated_at, state_changed_at)
               SELECT l.id, l.owner_id, 'intro', 2, 'dispatched', now(), 'history:' || g, 0,
                   '{}', 0, '', '', '', '', '', '', NULL, '', '', 0, 0, now(), now(), now()
               FROM generate_series(1, %s) g JOIN outreach_lead l ON l.id = (SELECT min(id) FROM outreach_lead) + (g %% %s)""",
            [rows, owners],
        )
        for state in ("generating", "sending"):
            cur.execute(
                "UPDATE outreach_outreach SET state = %s WHERE state = 'dispatched' OR state = 'generating'",
                [state],
            )
        cur.execute("UPDATE outreach_outreach SET state = 'sent', sent_at = now() WHERE state = 'sending'")
        cur.execute(
            """INSERT INTO outreach_ownerdailysends (owner_id, day, sent)
               SELECT owner_id, current_date, count(*) FROM outreach_outreach WHERE state = 'sent' GROUP BY owner_id
               ON CONFLICT (owner_id, day) DO UPDATE SET sent = excluded.sent"""
        )
        cur.execute("ANALYZE")


def _requeue(ids: list[int]) -> None:
    from outreach.models import Outreach

    Outreach.objects.filter(id__in=ids).update(state="queued", reservation_id="")


def _measure(
    *, depth: int, owners: int, slots: int, cycles: int, history: int = 0
) -> tuple[float, float, float]:
    import redis
    from django.conf import settings
    from django.db import connection

    from orchestrator.budget import Budget, Limits
    from orchestrator.dispatch.cycle import dispatch_cycle

    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    budget = Budget(redis_client=client, limits=Limits(rpm=10**9, tpm=10**12, burst_ms=60_000))
    settings.DISPATCH_MAX_IN_FLIGHT = slots
    _fill(depth=depth, owners=owners)
    if history:
        _add_sent_history(rows=history, owners=owners)
    times, dispatched = [], 0
    for i in range(cycles + 3):
        report = dispatch_cycle(budget=budget)
        connection.close_if_unusable_or_obsolete()
        if i >= 3:  # warm-up cycles untimed
            times.append(report.duration_ms)
            dispatched += len(report.generation)
        _requeue(report.generation)
        client.flushdb()
    # Never None: main() requires --cycles >= 1, so there is a time.
    median = percentile(values=times, fraction=0.5) or 0.0
    p95 = percentile(values=times, fraction=0.95) or 0.0
    return median, p95, dispatched / (sum(times) / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--depths", help="queue depths to try (default 1000,10000,100000,1000000; 10000 with --history)"
    )
    parser.add_argument("--owners", type=int, default=1000)
    parser.add_argument("--slots", type=int, default=500)
    parser.add_argument("--cycles", type=int, default=15)
    parser.add_argument(
        "--history", help="sent-today row counts to try at one fixed depth, e.g. 0,100000,1000000"
    )
    args = parser.parse_args()
    if args.cycles < 1:
        parser.error("--cycles: at least 1")
    django_start(env=django_env(database_url=database_for(name="outreach_bench"), redis_url=redis_for(db=14)))
    print(
        f"owners={args.owners} slots/cycle={args.slots} cycles={args.cycles} (PostgreSQL, budget unlimited)"
    )
    if args.history:
        depth = int((args.depths or "10000").split(",")[0])
        runs = [(depth, int(h)) for h in args.history.split(",")]
        label = f"sent today (queued {depth:,})"
    else:
        runs = [(int(d), 0) for d in (args.depths or "1000,10000,100000,1000000").split(",")]
        label = "queued rows"
    print(f"{label:>26} {'cycle p50 ms':>13} {'cycle p95 ms':>13} {'dispatched/s':>13} {'p50 vs first':>13}")
    first = None
    for depth, history in runs:
        t0 = time.perf_counter()
        median, p95, rate = _measure(
            depth=depth, owners=args.owners, slots=args.slots, cycles=args.cycles, history=history
        )
        first = first or median
        print(
            f"{history if args.history else depth:>26,} {median:>13.1f} {p95:>13.1f} {rate:>13,.0f} {median / first:>12.2f}x   (run {time.perf_counter() - t0:.0f}s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
