"""Dispatch cycle time and rate against queue depth, on PostgreSQL, budget unlimited.

    .venv/bin/python bench/dispatch.py [--depths 1000,10000,100000,1000000] [--owners 1000] [--slots 500]
    .venv/bin/python bench/dispatch.py --history 0,100000,1000000 [--depths 10000]
    .venv/bin/python bench/dispatch.py --owners 10000 --depths 1000,1000000 --controls --events 10000000

For each depth it fills a scratch database (outreach_bench) with that many QUEUED intro rows
spread over the owners, vacuums and checkpoints it as a server that has had the queue a while
would have (`_settle`; since 2026-12-07, night), runs warm-up cycles (enough for its window to
judge every owner once: `_warm_up`), then times cycles of `slots` picks (select, reserve,
claim, enqueue to Redis db 11), putting the claimed rows back to QUEUED between cycles
(untimed) so the depth stays constant, and emptying the budget and the broker's queues but not
the dispatcher's own state (its cursor, the waiting reasons it last wrote: kept from cycle to
cycle as in production; until 2026-11-27 the bench reset them too, so each cycle rewrote every
deferred owner's reason). Its first line names PostgreSQL's shared_buffers: at 10^6 rows the
queue outgrows the default 128 MB (docs/scaling.md, "PostgreSQL's buffer pool"; point
BENCH_DATABASE_URL at a server with a larger pool to compare). Prints median/p95 cycle time and
outreach dispatched/s, each phase's median (CycleReport.phases_ms: where the cycle's time
goes), and how many owners a cycle judged (its window: docs/dispatch.md, "The window") and
whether any had to widen it.

With --history, the depth stays fixed and what grows is the day's history instead: that many
rows already SENT today (each moved through the in-flight states first, as the pipeline does,
so the partial indexes carry the same dead entries), the owners' daily limits unlimited. The
cycle should not notice: the daily-limit check reads one count per owner, not the sent rows.

With --controls every control the cycle reads is on, none binding (as the cycle's statement
test, tests/orchestrator/dispatch/test_cycle_queries.py): two deployments (plan and context on
one, the message on the other, each priced), the organization's daily spend cap and its own
LLM cap, a pause of one owner, of the nudge tier and of another sender domain, and a mailbox on
a verified domain sending for every second owner; and every owner has learned its own job
size (owner_tokens, 1,800-2,196 tokens counted), as owners with finished jobs have (until
2026-12-05 none had, and the claim's reservations looked cheaper than in production). With
--events N the queued rows carry N history events (OutreachEvent rows, spread over them)
before the timed cycles.

With --in-flight N, N owners (every N-th of them, spread over the ids) each have one job in
flight (DISPATCHED) through the timed cycles, as a production dispatcher always has (the
in-flight cap raised by N, so the slots stay `slots`): the cycle counts their work on their
sender domains' days and prices it against the spend caps without judging them (until
2026-12-06, night, it judged each: docs/dispatch.md, "Work in flight judged no more").

With --org-rpm N (and --controls) the organization's own LLM cap is N requests/min, so at 300
its bucket fits a few outreach a cycle and binds, as a capped organization's does at its
limit: the cycle's picks stop at its group's slots. With --spend-cap D its daily spend cap is
D dollars, so at 0 every owner is refused (rule 7) and nothing is picked, as for the rest of
the day once an organization reaches its cap. Until 2026-12-07 each such cycle judged every
owner of the organization (docs/dispatch.md, "Owners no admission could admit end the
window's question").

With --organizations N the owners are dealt round N organizations (owner n to organization
n mod N, each a copy of the first with every control of its own: its LLM cap, which makes its
owners a budget group, its spend cap, its nudges paused, its mailbox), as a platform's are: the
window takes each budget group's places among the rounds' first owners, not its every owner
(docs/dispatch.md, "A budget group's window, its places in the tier's"). Not with --pairs.

With --pairs N it runs the issue's comparison instead (issue 30: the cycle at many owners and
a deep queue within 1.5x of the cycle at 10 owners and 10^3 rows), N times: 10 owners at the
first depth and --owners at the last, each filled afresh in a process and on stores of its
own, then timed in lockstep, one cycle of each in turn, so a pair's two sizes share the
machine's speed of the second (until 2026-12-07, session 41, they ran one after the other and
shared that of the minute: on a shared machine neighbouring runs differ by up to half). It
prints each pair's medians and their ratio, the median of its cycle-by-cycle ratios, and the
medians of each size and of the pairs' ratios. The small size's stores: a scratch database of
its own, or with BENCH_DATABASE_URL that database's name with "_small" on the same server
(created when missing, never dropped); Redis database 14, or with BENCH_REDIS_URL the next
database after its.

    .venv/bin/python bench/dispatch.py --controls --cycles 30 --pairs 5 --owners 10000 --depths 1000,1000000

    .venv/bin/python bench/dispatch.py --smoke   # 20 owners, 50 slots, depths 200 and 2,000, controls on, a pair: seconds

--smoke runs the same fill and cycles on its own scratch stores and exits 1 unless every timed
cycle dispatched a full batch.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import sys
import time
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.stack import (
    SMOKE_HELP,
    bench_intro,
    bench_lead,
    database_for,
    django_env,
    django_start,
    redis_for,
    scratch_database,
    smoke_stores,
    smoke_verdict,
)
from devtools.bulk import SPREAD, rows_clone
from orchestrator.figures import percentile, ratio

WARM_UP = 3  # cycles run before the timed ones: connections, plans and caches warm
PAIR_OWNERS = 10  # --pairs: the small cycle, 10 owners at the first depth


def _warm_up(*, owners: int, slots: int) -> int:
    """Cycles before the timed ones: WARM_UP, and enough more for the window to have judged
    every owner once (it moves on by about `slots` owners a cycle, one pick each: cycle.window).
    A pause (the bench's nudge pause of the organization) has its reason written on each
    owner's rows the first time a cycle judges the owner, and never again while it holds: in
    production a transient of the first owners / slots cycles after a pause, which the bench
    would otherwise time as its steady state (until 2026-12-05 it did: 500 reasons written in
    every timed cycle, 21 ms at 10,000 owners)."""
    return WARM_UP + -(-owners // slots)


@dataclass(frozen=True)
class Templates:
    """One owner, lead and queued intro written through the ORM (bench.stack's helpers, which
    follow the model); the bench's other rows are SQL copies of them."""

    owner_id: int
    lead_id: int
    outreach_id: int


def _seed(*, owners: int, organizations: int = 1) -> Templates:
    """`owners` round-the-clock agents, unlimited per day, one lead each (the first from the
    ORM), dealt round the `organizations` (copies of the first) by id."""
    from datetime import time as dtime

    from django.db import connection
    from django.utils import timezone

    from outreach.models import Lead, Owner
    from outreach.services.owners import OwnerSpec, owner_upsert

    with connection.cursor() as cur:
        cur.execute(
            "TRUNCATE outreach_outreachevent, outreach_outreach, outreach_lead, outreach_owner, outreach_organization CASCADE"
        )
    spec = OwnerSpec("owner 1", "agent", 1_000_000, dtime(0), dtime(0), "UTC", working_days="1234567")
    owner = owner_upsert(spec=spec)[0]
    lead = bench_lead(owner=owner, n=f"{owner.pk}", domain="bench.example")
    lead.save()
    outreach = bench_intro(lead=lead, now=timezone.now())
    outreach.save()
    rows_clone(
        model=Owner,
        template_id=owner.pk,
        rows_sql="CROSS JOIN generate_series(2, %s) g WHERE t.id = %s",
        overrides={"name": "'owner ' || g"},
        params=[owners],
    )
    rows_clone(
        model=Lead,
        template_id=lead.pk,
        rows_sql="JOIN outreach_owner o ON o.id <> t.owner_id WHERE t.id = %s",
        overrides={"owner_id": "o.id", "email": "'lead' || o.id || '@bench.example'"},
        params=[],
    )
    if organizations > 1:
        _deal(organizations=organizations, template_id=owner.organization_id)
    return Templates(owner_id=owner.pk, lead_id=lead.pk, outreach_id=outreach.pk)


def _deal(*, organizations: int, template_id: int) -> None:
    """`organizations` - 1 copies of organization `template_id`, and the owners (with their
    leads) dealt round all of them by id: owner n's is organization n mod `organizations`."""
    from django.db import connection

    from outreach.models import Organization

    rows_clone(
        model=Organization,
        template_id=template_id,
        rows_sql="CROSS JOIN generate_series(2, %s) g WHERE t.id = %s",
        overrides={"name": "t.name || ' ' || g"},
        params=[organizations],
    )
    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE outreach_owner o SET organization_id = orgs.id
            FROM (SELECT id, row_number() OVER (ORDER BY id) - 1 AS n FROM outreach_organization) orgs,
                 (SELECT id, row_number() OVER (ORDER BY id) - 1 AS n FROM outreach_owner) ranked
            WHERE ranked.id = o.id AND orgs.n = ranked.n %% %s
            """,
            [organizations],
        )
        cur.execute(
            "UPDATE outreach_lead l SET organization_id = o.organization_id FROM outreach_owner o "
            "WHERE o.id = l.owner_id AND l.organization_id <> o.organization_id"
        )


def _fill(*, templates: Templates, depth: int, history: int) -> None:
    """`history` outreach sent today (first: its moves must not touch the queued rows), then
    `depth` QUEUED intros due over the last hour, both spread over the owners."""
    from django.db import connection

    from outreach.models import Outreach

    if history:
        _add_sent_history(templates=templates, rows=history)
    rows_clone(
        model=Outreach,
        template_id=templates.outreach_id,
        rows_sql=SPREAD,
        overrides={
            "lead_id": "l.id",
            "owner_id": "l.owner_id",
            "idempotency_key": "'bench:' || g",
            "not_before": "now() - interval '1 hour' + g * interval '1 ms'",
        },
        params=[depth],
    )
    Outreach.objects.filter(pk=templates.outreach_id).delete()  # the template is not one of them
    with connection.cursor() as cur:
        cur.execute("ANALYZE")


def _add_sent_history(*, templates: Templates, rows: int) -> None:
    """`rows` outreach sent today, each moved through the in-flight states first (as the
    pipeline does, so the partial indexes carry the same dead entries), and the per-owner daily
    counts the SENT transition keeps."""
    from django.db import connection
    from django.db.models import Count
    from django.utils import timezone

    from outreach.models import Outreach, OwnerDailySends, State

    rows_clone(
        model=Outreach,
        template_id=templates.outreach_id,
        rows_sql=SPREAD,
        overrides={
            "lead_id": "l.id",
            "owner_id": "l.owner_id",
            "idempotency_key": "'history:' || g",
            "state": "'dispatched'",
            "not_before": "now()",
        },
        params=[rows],
    )
    with connection.cursor() as cur:
        for state in ("generating", "sending"):
            cur.execute(
                "UPDATE outreach_outreach SET state = %s WHERE state = 'dispatched' OR state = 'generating'",
                [state],
            )
        cur.execute("UPDATE outreach_outreach SET state = 'sent', sent_at = now() WHERE state = 'sending'")
    sent = Outreach.objects.filter(state=State.SENT).values("owner_id").annotate(n=Count("id"))
    today = timezone.now().date()  # the owners are on UTC
    OwnerDailySends.objects.bulk_create(
        OwnerDailySends(owner_id=row["owner_id"], day=today, sent=row["n"]) for row in sent
    )


def _controls_on(*, org_rpm: int = 10**8, spend_cap: str = "1000000") -> None:
    """Every control the cycle reads, none binding (the bench's organizations and owners),
    but each organization's own LLM cap at `org_rpm` requests/min (binding at a few hundred)
    and its daily spend cap at `spend_cap` dollars (binding at 0). Each organization has its
    nudges paused and a mailbox on its own verified domain for every second of its owners."""
    from datetime import date
    from decimal import Decimal

    from django.conf import settings

    from config.deployments import Deployment
    from orchestrator.dispatch.owner_tokens import owner_tokens_record
    from orchestrator.models import Pause
    from outreach.models import Mailbox, Organization, Owner, VerifiedDomain
    from outreach.tiers import Tier

    settings.LLM_DEPLOYMENTS = (
        Deployment(name="small", model="m-small", rpm=10**7, tpm=10**10),
        Deployment(name="large", model="m-large", rpm=10**7, tpm=10**10),
    )
    settings.LLM_STEP_MODELS = {"plan": "small", "context": "small", "message": "large"}
    settings.LLM_FALLBACKS = {}
    settings.LLM_RPM, settings.LLM_TPM = 10**7, 10**10  # an organization's cap is held under these
    settings.LLM_PRICES = {
        "m-small": (Decimal("0.00015"), Decimal("0.0006")),
        "m-large": (Decimal("0.0025"), Decimal("0.01")),
    }
    Organization.objects.update(daily_spend_cap=Decimal(spend_cap), llm_rpm=org_rpm, llm_tpm=2 * 10**9)
    owners = list(Owner.objects.order_by("id").values_list("id", flat=True))
    Pause.objects.create(owner_id=owners[0], reason="bench: one owner paused")
    Pause.objects.create(sender_domain="paused.example", reason="bench: another domain paused")
    organizations = list(Organization.objects.order_by("id").values_list("id", flat=True))
    for n, org_id in enumerate(organizations):
        Pause.objects.create(organization_id=org_id, tier=int(Tier.NUDGE), reason="bench: nudges paused")
        VerifiedDomain.objects.create(organization_id=org_id, domain="boxes.example")
        box = Mailbox.objects.create(
            organization_id=org_id,
            address=f"box{'' if n == 0 else n + 1}@boxes.example",
            daily_cap=10_000,
            ramp_from=date(2020, 1, 1),
            min_spacing_s=0,
            max_spacing_s=0,
        )
        members = list(
            Owner.objects.filter(organization_id=org_id).order_by("id").values_list("id", flat=True)
        )
        box.owners.add(*members[1::2])
    # Every owner has finished jobs: the sizes it learned are its own (owner_tokens), as in
    # production, where a claim's picks rarely share one.
    for owner_id in owners:
        spread = owner_id % 397
        owner_tokens_record(owner_id=owner_id, settled=1_500 + spread, counted=1_800 + spread, kind="intro")


def _add_events(*, events: int) -> None:
    """`events` history events spread over the queued rows, a day old and older."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            """
            INSERT INTO outreach_outreachevent
                (outreach_id, from_state, to_state, at, attempt, error_class, note, actor_id)
            SELECT o.ids[1 + g %% o.n], 'queued', 'dispatched',
                   now() - interval '1 day' - g * interval '1 ms', 0, '', '', NULL
            FROM generate_series(0, %s - 1) g,
                 (SELECT array_agg(id) AS ids, count(*) AS n FROM outreach_outreach) o
            """,
            [events],
        )
        cur.execute("ANALYZE outreach_outreachevent")


def _in_flight(*, jobs: int, owners: int) -> None:
    """One queued row of each of `jobs` owners spread over the ids moved to DISPATCHED, an LLM
    job in flight (not a transition: the bench's set-up), kept so through the timed cycles."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            """
            UPDATE outreach_outreach SET state = 'dispatched', state_changed_at = now()
            WHERE id IN (
                SELECT DISTINCT ON (q.owner_id) q.id FROM outreach_outreach q
                JOIN (SELECT id, row_number() OVER (ORDER BY id) AS n FROM outreach_owner) o ON o.id = q.owner_id
                WHERE q.state = 'queued' AND o.n %% %s = 0
                ORDER BY q.owner_id, q.id
                LIMIT %s
            )
            """,
            [max(1, owners // jobs), jobs],
        )


def _reset_all_but_dispatcher(client: Any) -> None:
    """Between cycles (untimed): the budget and the broker's queues emptied, so the budget stays
    unlimited and the messages do not pile up; the dispatcher's own state (its cursor, the
    reasons it last wrote) kept, as it is from one cycle to the next in production."""
    keep = b"orchestrator:dispatch:"
    doomed = [key for key in client.scan_iter(count=1000) if not key.startswith(keep)]
    for start in range(0, len(doomed), 1000):
        client.delete(*doomed[start : start + 1000])


def _requeue(ids: list[int]) -> None:
    """Put the claimed rows back (untimed, not a transition: the bench's reset, not the
    product's), so every cycle sees the same depth."""
    from outreach.models import Outreach

    Outreach.objects.filter(id__in=ids).update(state="queued", reservation_id="", llm_route="")


@dataclass(frozen=True)
class Measured:
    depth: int
    history: int
    p50_ms: float
    p95_ms: float
    dispatched: int  # in the timed cycles
    per_s: float | None  # outreach dispatched per second of cycle time
    seconds: float  # the whole run: fill, warm-up and timed cycles
    phases_p50_ms: dict[str, float]  # each phase's median over the timed cycles (CycleReport.phases_ms)
    judged: tuple[int, int]  # owners judged (the cycle's window) in the timed cycles: fewest, most
    windows: int  # the most windows a timed cycle judged (more than 1: it widened)


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a run sets up (`_prepare`): the queue, its owners and the cycle's slots, and the
    options above (history, controls, caps, events, jobs in flight, organizations)."""

    depth: int
    owners: int
    slots: int
    history: int = 0
    controls: bool = False
    org_rpm: int = 10**8
    spend_cap: str = "1000000"
    events: int = 0
    in_flight: int = 0
    organizations: int = 1


def _measure(*, cycles: int, setup: Setup) -> Measured:
    """`cycles` timed cycles on the stores `_set_up` makes of `setup`."""
    started = time.perf_counter()
    stores = _set_up(setup)
    reports = [_cycle_once(stores) for _ in range(cycles)]
    return _measured(
        depth=setup.depth, history=setup.history, reports=reports, seconds=time.perf_counter() - started
    )


def _set_up(setup: Setup) -> tuple[Any, Any]:
    """`_prepare(setup)`, then its warm-up cycles (`_warm_up`): the stores, ready to time."""
    stores = _prepare(setup)
    for _ in range(_warm_up(owners=setup.owners, slots=setup.slots)):
        _cycle_once(stores)
    return stores


def _prepare(setup: Setup) -> tuple[Any, Any]:
    """The run's set-up (untimed): the bench's Redis database emptied, the rows filled, the
    controls on, the database settled; (the unlimited budget, its Redis client)."""
    import redis
    from django.conf import settings

    from orchestrator.budget import Budget, Limits

    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    budget = Budget(redis_client=client, limits=Limits(rpm=10**9, tpm=10**12, burst_ms=60_000))
    # the budget is unlimited: this cap (less the jobs kept in flight) is the slot count
    settings.DISPATCH_MAX_IN_FLIGHT = setup.slots + setup.in_flight
    templates = _seed(owners=setup.owners, organizations=setup.organizations)
    _fill(templates=templates, depth=setup.depth, history=setup.history)
    if setup.controls:
        _controls_on(org_rpm=setup.org_rpm, spend_cap=setup.spend_cap)
    if setup.events:
        _add_events(events=setup.events)
    if setup.in_flight:
        _in_flight(jobs=setup.in_flight, owners=setup.owners)
    _settle()
    return budget, client


def _cycle_once(stores: tuple[Any, Any]) -> Any:
    """One cycle (its CycleReport), then (untimed) its claimed rows put back and the budget and
    the broker's queues emptied."""
    from django.db import connection

    from orchestrator.dispatch.cycle import dispatch_cycle

    budget, client = stores
    report = dispatch_cycle(budget=budget)
    connection.close_if_unusable_or_obsolete()
    _requeue(report.generation)
    _reset_all_but_dispatcher(client)
    return report


def _measured(*, depth: int, history: int, reports: list[Any], seconds: float) -> Measured:
    """What the timed cycles' reports add up to."""
    times = [r.duration_ms for r in reports]
    dispatched = sum(len(r.generation) for r in reports)
    return Measured(
        depth=depth,
        history=history,
        # Never None: main() requires --cycles >= 1, so there is a time.
        p50_ms=percentile(values=times, fraction=0.5) or 0.0,
        p95_ms=percentile(values=times, fraction=0.95) or 0.0,
        dispatched=dispatched,
        per_s=ratio(dispatched, sum(times) / 1000),
        seconds=seconds,
        phases_p50_ms={
            phase: percentile(values=[r.phases_ms[phase] for r in reports], fraction=0.5) or 0.0
            for phase in reports[0].phases_ms
        },
        judged=(min(r.judged for r in reports), max(r.judged for r in reports)),
        windows=max(r.windows for r in reports),
    )


def _settle() -> None:
    """After the set-up (untimed): VACUUM (ANALYZE), then a CHECKPOINT, as a queue the server has
    had a while looks. A bulk fill leaves no page of the queue all-visible, so every
    index-only probe of an owner's first rows fetched their heap pages (1,535 fetches for 512
    owners, 4.8 ms, EXPLAIN ANALYZE); autovacuum's visit of the fresh rows, due by the insert
    threshold, began whenever its launcher next woke, in the fill or in the cycles; and the
    fill's WAL set off checkpoints ("checkpoint starting: wal", 16-17 s apart) that ran through
    the timed cycles (the server's log, 10^6 rows, 2026-12-07). Without superuser (CHECKPOINT
    needs it, or pg_checkpoint) the run says so and goes on."""
    from django.db import DatabaseError, connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
        try:
            cursor.execute("CHECKPOINT")
        except DatabaseError as exc:
            print(f"no CHECKPOINT after the fill ({exc}): the timed cycles may run through one")


def _shared_buffers() -> str:
    """The database's buffer pool: at 10^6 queued rows the queue table and its indexes outgrow
    PostgreSQL's default 128 MB, and the cycle's probes read from the OS instead (docs/scaling.md,
    "PostgreSQL's buffer pool"), so every run says which it had."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SHOW shared_buffers")
        return str(cursor.fetchone()[0])


def smoke_problems(*, runs: list[Measured], slots: int, cycles: int) -> list[str]:
    """What makes a run broken rather than slow: a cycle that dispatched less than a full
    batch from a queue deeper than it (the depths are chosen so it always is)."""
    return [
        f"depth {r.depth:,}: dispatched {r.dispatched} in {cycles} cycles, not {slots * cycles}"
        for r in runs
        if r.dispatched != slots * cycles
    ]


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
    parser.add_argument("--controls", action="store_true", help="every control on, none binding (see above)")
    parser.add_argument("--events", type=int, default=0, help="history events over the queued rows")
    parser.add_argument(
        "--in-flight", type=int, default=0, help="owners with a job in flight throughout (see above)"
    )
    parser.add_argument(
        "--org-rpm",
        type=int,
        default=10**8,
        help="with --controls, the organization's own LLM cap (see above)",
    )
    parser.add_argument(
        "--spend-cap",
        default="1000000",
        help="with --controls, the organization's daily spend cap in dollars",
    )
    parser.add_argument(
        "--organizations",
        type=int,
        default=1,
        help="organizations the owners are dealt round, each with its own controls (see above)",
    )
    parser.add_argument(
        "--pairs",
        type=int,
        default=0,
        help="runs of 10 owners at the first depth and --owners at the last, in turn (see above)",
    )
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.owners, args.slots, args.cycles = 20, 50, 3
        args.depths, args.history = "200,2000", args.history and "0,500"
        args.controls, args.events, args.in_flight, args.organizations = True, 1000, 5, 2
    if args.pairs < 0:
        parser.error("--pairs: at least 0")
    if args.cycles < 1:
        parser.error("--cycles: at least 1")
    if args.in_flight < 0:
        parser.error("--in-flight: at least 0")
    if args.org_rpm < 1:
        parser.error("--org-rpm: at least 1")
    if not 1 <= args.organizations <= args.owners:
        parser.error(f"--organizations: from 1 to --owners ({args.owners:,}), got {args.organizations:,}")
    if args.organizations > 1 and args.pairs:
        parser.error("--organizations: not with --pairs (the issue's comparison is of one organization)")
    try:
        if Decimal(args.spend_cap) < 0:
            raise InvalidOperation
    except InvalidOperation:
        parser.error(f"--spend-cap: dollars, at least 0 (got {args.spend_cap!r})")
    if args.smoke:
        with smoke_stores():
            runs = _run(args=args)
            args.pairs = 1
            runs += _pairs(args=args)
        smoke_verdict(problems=smoke_problems(runs=runs, slots=args.slots, cycles=args.cycles))
    elif args.pairs:
        _pairs(args=args)
    else:
        _run(args=args)


def _start() -> None:
    """Set this process up on the bench's stores, once (a second start would drop and create
    the scratch database under the first's connection)."""
    global _started
    if _started:
        return
    _started = True
    _process_start(env=django_env(database_url=_stores()[0], redis_url=_stores()[1]))


_started = False


def _process_start(*, env: dict[str, str]) -> None:
    """Django set up on `env`'s stores (bench.stack.django_start). The cycle runs in this
    process: set up as the orchestrator worker's child sets up its own (Django's DEBUG off as
    there: bench.stack's set-up)."""
    django_start(env=env)
    from config.collector import collector_settle

    collector_settle()


@functools.cache
def _stores() -> tuple[str, str]:
    """The bench's database and Redis URLs (database_for: a scratch database made once a run)."""
    return database_for(name="outreach_bench"), redis_for(db=11)


def _small_stores() -> tuple[str, str]:
    """The stores of --pairs' small size, beside `_stores` (the large's): its own database and
    Redis database, since the two run at once. A scratch database; with BENCH_DATABASE_URL,
    that database's name with "_small" on the same server (created when missing, never
    dropped), and with BENCH_REDIS_URL the next Redis database after its."""
    import psycopg

    url, redis_url = os.environ.get("BENCH_DATABASE_URL"), os.environ.get("BENCH_REDIS_URL")
    if url:
        server, _, name = url.rpartition("/")
        name = name.partition("?")[0] + "_small"
        with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
        database = f"{server}/{name}"
    else:
        database = scratch_database(name="outreach_bench_small")
    if redis_url:
        base, _, db = redis_url.rpartition("/")
        if not db.isdigit():
            sys.exit(
                f"BENCH_REDIS_URL: end it with its database number (redis://host:port/11), got {redis_url}"
            )
        return database, f"{base}/{int(db) + 1}"
    return database, redis_for(db=14)


def _pairs(*, args: argparse.Namespace) -> list[Measured]:
    """`args.pairs` runs of the issue's comparison: 10 owners at the first depth and
    `args.owners` at the last, each in a process of its own on its own stores, filled and warmed
    up at once, then timed in lockstep, one cycle of each in turn (which goes first alternating)
    with the other idle. Each pair's medians and ratio, the median of its cycle-by-cycle ratios,
    then the medians of each size and of the ratios.

    In lockstep the two medians share the machine's speed of the second: run one after the
    other (until 2026-12-07, session 41), a pair's shared that of the minute, and on this
    shared machine neighbouring runs differ by up to half, its ratios by a quarter (1.29-1.71x
    within one run of five pairs, docs/benchmarks.md)."""
    _start()
    depths = [int(d) for d in (args.depths or "1000,1000000").split(",")]
    sizes = [(PAIR_OWNERS, depths[0], _small_stores()), (args.owners, depths[-1], _stores())]
    print(
        f"pairs: {PAIR_OWNERS} owners at {depths[0]:,} queued rows, then {args.owners:,} at {depths[-1]:,}; "
        f"slots/cycle={args.slots} cycles={args.cycles} (PostgreSQL, shared_buffers {_shared_buffers()}"
        f"{', every control on' if args.controls else ''}), in lockstep"
    )
    runs: list[Measured] = []
    small, large, ratios = [], [], []
    for n in range(1, args.pairs + 1):
        pair, by_cycle = _lockstep(sizes=sizes, slots=args.slots, cycles=args.cycles, controls=args.controls)
        runs += pair
        small.append(pair[0].p50_ms)
        large.append(pair[1].p50_ms)
        ratios.append(ratio(pair[1].p50_ms, pair[0].p50_ms) or 0.0)
        print(
            f"pair {n}: {pair[0].p50_ms:.1f} ms and {pair[1].p50_ms:.1f} ms, {ratios[-1]:.2f}x; "
            f"cycle by cycle {by_cycle:.2f}x ({pair[1].judged[1]:,} owners judged, {pair[1].windows} window(s))",
            flush=True,
        )
    median = [percentile(values=v, fraction=0.5) or 0.0 for v in (small, large, ratios)]
    print(
        f"medians: {median[0]:.1f} ms and {median[1]:.1f} ms ({ratio(median[1], median[0]) or 0:.2f}x); "
        f"median of the pairs' ratios {median[2]:.2f}x"
    )
    return runs


def _lockstep(
    *, sizes: list[tuple[int, int, tuple[str, str]]], slots: int, cycles: int, controls: bool
) -> tuple[list[Measured], float]:
    """Each of `sizes` (owners, depth, stores) in a process of its own (`_stepper`), set up at
    once, then `cycles` timed cycles of each in turn; what each measured, and the median of the
    cycle-by-cycle ratios of the last size's to the first's."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no Django of this one's
    pipes, processes = [], []
    for owners, depth, (database, redis_url) in sizes:
        ours, theirs = spawn.Pipe()
        env = django_env(database_url=database, redis_url=redis_url)
        process = spawn.Process(
            target=_stepper,
            kwargs={
                "pipe": theirs,
                "env": env,
                "owners": owners,
                "depth": depth,
                "slots": slots,
                "controls": controls,
            },
        )
        process.start()
        pipes.append(ours)
        processes.append(process)
    try:
        for pipe in pipes:
            if pipe.recv() != "ready":
                raise SystemExit("a lockstep process failed in its set-up (its traceback is above)")
        times: list[list[float]] = [[] for _ in sizes]
        for cycle in range(cycles):
            for i in range(len(sizes)) if cycle % 2 == 0 else reversed(range(len(sizes))):
                pipes[i].send("cycle")
                times[i].append(pipes[i].recv())
        measured = []
        for pipe in pipes:
            pipe.send("stop")
            measured.append(Measured(**pipe.recv()))
    finally:
        for pipe in pipes:  # a process still waiting for its next word ends at the closed pipe
            pipe.close()
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    by_cycle = percentile(values=[b / a for a, b in zip(times[0], times[-1], strict=True) if a], fraction=0.5)
    return measured, by_cycle or 0.0


def _stepper(*, pipe: Any, env: dict[str, str], owners: int, depth: int, slots: int, controls: bool) -> None:
    """One size of a lockstep pair, in its own process: set up on `env`'s stores, filled and
    warmed up, says "ready"; then a cycle for each "cycle" (answering its time), until "stop",
    answered with what the timed cycles measured (a Measured's fields: a class of the spawned
    main module does not unpickle in the parent)."""
    try:
        started = time.perf_counter()
        _process_start(env=env)
        stores = _set_up(Setup(depth=depth, owners=owners, slots=slots, controls=controls))
    except BaseException:
        pipe.send("failed")
        raise
    pipe.send("ready")
    reports = []
    while pipe.recv() == "cycle":
        reports.append(_cycle_once(stores))
        pipe.send(reports[-1].duration_ms)
    measured = _measured(depth=depth, history=0, reports=reports, seconds=time.perf_counter() - started)
    pipe.send(dataclasses.asdict(measured))


def _run(*, args: argparse.Namespace) -> list[Measured]:
    _start()
    on = f", every control on, {args.events:,} events of history" if args.controls else ""
    on = on or (f", {args.events:,} events of history" if args.events else "")
    on += f", {args.in_flight:,} owners with a job in flight" if args.in_flight else ""
    on += f", the organization's LLM cap {args.org_rpm:,} requests/min" if args.org_rpm != 10**8 else ""
    on += f", its spend cap ${args.spend_cap}" if args.spend_cap != "1000000" else ""
    on += f", the owners dealt round {args.organizations:,} organizations" if args.organizations > 1 else ""
    print(
        f"owners={args.owners} slots/cycle={args.slots} cycles={args.cycles} "
        f"(PostgreSQL, shared_buffers {_shared_buffers()}, budget unlimited{on})"
    )
    if args.history:
        depth = int((args.depths or "10000").split(",")[0])
        plan = [(depth, int(h)) for h in args.history.split(",")]
        label = f"sent today (queued {depth:,})"
    else:
        plan = [(int(d), 0) for d in (args.depths or "1000,10000,100000,1000000").split(",")]
        label = "queued rows"
    print(f"{label:>26} {'cycle p50 ms':>13} {'cycle p95 ms':>13} {'dispatched/s':>13} {'p50 vs first':>13}")
    runs: list[Measured] = []
    for depth, history in plan:
        run = _measure(
            cycles=args.cycles,
            setup=Setup(
                depth=depth,
                owners=args.owners,
                slots=args.slots,
                history=history,
                controls=args.controls,
                org_rpm=args.org_rpm,
                spend_cap=args.spend_cap,
                events=args.events,
                in_flight=args.in_flight,
                organizations=args.organizations,
            ),
        )
        first = runs[0].p50_ms if runs else run.p50_ms
        runs.append(run)
        print(
            f"{history if args.history else depth:>26,} {run.p50_ms:>13.1f} {run.p95_ms:>13.1f} "
            f"{run.per_s or 0:>13,.0f} {ratio(run.p50_ms, first) or 0:>12.2f}x   (run {run.seconds:.0f}s)",
            flush=True,
        )
        print(f"{'phases p50 ms':>26}  " + "  ".join(f"{k} {v:.1f}" for k, v in run.phases_p50_ms.items()))
        low, high = run.judged
        judged = f"{low:,}" if low == high else f"{low:,}-{high:,}"
        print(f"{'owners judged':>26}  {judged} of {args.owners:,} a cycle, at most {run.windows} window(s)")
    return runs


if __name__ == "__main__":
    main()
