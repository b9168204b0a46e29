"""Load time of `assign_leads` for a 100,000-row CSV, on PostgreSQL.

    .venv/bin/python bench/assign_leads.py [--rows 100000] [--owners 50]
    .venv/bin/python bench/assign_leads.py --smoke   # 300 rows, 5 owners, seconds (CI)

Generates the CSV in a temporary directory (time zones and owners spread over the rows),
creates the scratch database outreach_bench_intake (dropped first if it exists), migrates it,
adds the owners, then times the command end to end: reading, validating every row, the parent
and its children, and the leads with their intro + nudges (3 outreach per lead). Then times a
re-run of the same file (which must create nothing). Target: under 60 s for 100,000 rows.

--smoke does the same with 300 rows and 5 owners on its own scratch stores, and exits 1 unless
every row became a lead with its 3 outreach and the re-run created nothing.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a file: the repository

from bench.stack import (
    SMOKE_HELP,
    database_for,
    django_env,
    django_start,
    redis_for,
    smoke_stores,
    smoke_verdict,
)
from orchestrator.figures import ratio

DB_NAME = "outreach_bench_intake"
ZONES = ["Europe/Berlin", "America/New_York", "Asia/Tokyo", "UTC", "Australia/Sydney", "America/Los_Angeles"]


def _write_csv(path: Path, *, rows: int, owners: int) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["email", "first_name", "last_name", "company", "title", "timezone", "owner"])
        for i in range(rows):
            writer.writerow(
                [
                    f"lead{i}@prospect{i % 997}.example",
                    "Pat",
                    f"Lead{i}",
                    f"Company {i % 5000}",
                    "CTO",
                    ZONES[i % len(ZONES)],
                    f"owner {i % owners}",
                ]
            )


def _owners(count: int) -> None:
    from datetime import time as dtime

    from outreach.models import Organization, Owner

    org = Organization.objects.create(name="Default")
    Owner.objects.bulk_create(
        Owner(organization=org, name=f"owner {i}", kind="agent", hours_start=dtime(9), hours_end=dtime(17))
        for i in range(count)
    )


def _timed_run(path: Path) -> tuple[float, str]:
    from django.core.management import call_command

    out = io.StringIO()
    started = time.perf_counter()
    with redirect_stdout(out):
        call_command("assign_leads", str(path), "--no-progress", stdout=out)
    return time.perf_counter() - started, out.getvalue().strip()


OUTREACH_PER_LEAD = 3  # the intro and its two nudges


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--owners", type=int, default=50)
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    args = parser.parse_args()
    if args.smoke:
        args.rows, args.owners = 300, 5
        with smoke_stores():
            counts = measure(args=args)
        smoke_verdict(problems=smoke_problems(counts=counts, rows=args.rows))
    else:
        measure(args=args)


def smoke_problems(*, counts: tuple[int, int, int, int], rows: int) -> list[str]:
    """Broken, not slow: a row not loaded, a lead without its outreach, a re-run that created."""
    leads, outreach, leads_after_rerun, outreach_after_rerun = counts
    problems = []
    if (leads, outreach) != (rows, OUTREACH_PER_LEAD * rows):
        problems.append(f"{rows} rows made {leads} leads and {outreach} outreach")
    if (leads_after_rerun, outreach_after_rerun) != (leads, outreach):
        problems.append(f"the re-run created {leads_after_rerun - leads} leads")
    return problems


def measure(*, args: argparse.Namespace) -> tuple[int, int, int, int]:
    """Load, time, re-load; leads and outreach after the load and after the re-run."""
    django_start(env=django_env(database_url=database_for(name=DB_NAME), redis_url=redis_for(db=11)))
    from outreach.models import Lead, Outreach

    _owners(args.owners)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "leads.csv"
        _write_csv(path, rows=args.rows, owners=args.owners)
        size_mb = path.stat().st_size / 1e6
        seconds, summary = _timed_run(path)
        loaded = Lead.objects.count(), Outreach.objects.count()
        rerun_seconds, rerun_summary = _timed_run(path)
    print(f"file: {args.rows:,} rows, {size_mb:.1f} MB, {args.owners} owners, {len(ZONES)} time zones")
    print(f"  {summary}")
    print(
        f"load: {seconds:.1f} s ({ratio(args.rows, seconds) or 0:,.0f} rows/s; target < 60 s for 100,000 rows)"
    )
    print(f"  leads: {Lead.objects.count():,}, outreach: {Outreach.objects.count():,}")
    print(f"re-run: {rerun_seconds:.1f} s, {rerun_summary[:60]}...")
    return (*loaded, Lead.objects.count(), Outreach.objects.count())


if __name__ == "__main__":
    main()
