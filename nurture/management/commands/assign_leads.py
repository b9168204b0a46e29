"""python manage.py assign_leads FILE.csv [--org NAME] [--no-progress] [--fan-out [--timeout S]]

Columns: email, first_name, last_name, company, title, timezone, owner (the owner's name).
Every row is validated first; one bad row and nothing is loaded. Re-running a file creates nothing new.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from nurture.intake.assignment import (
    assignment_outcomes,
    assignment_progress,
    assignment_run,
    assignment_start,
    owner_directory_load,
)
from nurture.intake.csv_file import ParsedFile, RowError, csv_decode, parse_assignment_csv
from nurture.intake.tasks import intake_enqueue
from outreach.models import AssignmentBatch, AssignmentItem, Organization

POLL_S = 0.5


class Command(BaseCommand):
    help = "Assign leads from a CSV file to owners: validate every row, then queue each lead's sequence."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "file", help="CSV with columns email, first_name, last_name, company, title, timezone, owner."
        )
        parser.add_argument(
            "--org", help="Organization to load into. Needed only if an owner name exists in several."
        )
        parser.add_argument(
            "--no-progress", action="store_true", help="No progress bar (also off when not a TTY)."
        )
        parser.add_argument(
            "--fan-out",
            action="store_true",
            help="Hand the per-lead intake to Celery workers (orchestrator queue) and wait until all are done.",
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=600.0,
            help="With --fan-out: stop waiting after S seconds (default 600).",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if not 0 < opts["timeout"] < math.inf:  # before reading anything: a bad flag writes nothing
            raise CommandError(f"--timeout {opts['timeout']:g}: give a positive, finite number of seconds.")
        started = time.monotonic()
        path = Path(opts["file"])
        raw = _read(path)
        parsed = self._validate(path=path, raw=raw, org=opts["org"])
        if not parsed.rows:
            self.stdout.write(f"{path.name} has a header but no rows: nothing to load.")
            return
        assert parsed.organization_id is not None  # rows imply an owner, hence an organization
        org_name = Organization.objects.values_list("name", flat=True).get(id=parsed.organization_id)
        work = self._batch(path=path, raw=raw, parsed=parsed, org_name=org_name)
        if work is None:
            return
        batch, child_ids = work
        with self._progress(total=len(child_ids), quiet=opts["no_progress"]) as advance:
            if opts["fan_out"]:
                self._fan_out(batch=batch, child_ids=child_ids, timeout=opts["timeout"], advance=advance)
            else:
                assignment_run(batch_id=batch.pk, child_ids=child_ids, on_chunk=advance)
        self._summary(batch_id=batch.pk, org_name=org_name, seconds=time.monotonic() - started)
        if parsed.ignored_columns:
            self.stdout.write(f"Ignored column(s): {', '.join(parsed.ignored_columns)}.")

    def _batch(
        self, *, path: Path, raw: bytes, parsed: ParsedFile, org_name: str
    ) -> tuple[AssignmentBatch, list[int]] | None:
        """The batch to work on: this file's unfinished one, a new one, or None if nothing is new."""
        assert parsed.organization_id is not None  # rows imply an owner, hence an organization
        start = assignment_start(
            organization_id=parsed.organization_id,
            file_name=str(path),
            file_sha256=hashlib.sha256(raw).hexdigest(),
            rows=parsed.rows,
            now=timezone.now(),
        )
        if start.batch is None:
            assert start.plan is not None  # nothing new is a plan's verdict
            self.stdout.write(
                f"Nothing new: all {start.plan.rows} leads of {path.name} are already assigned in "
                f"{org_name} and have their sequences; no batch was created and no outreach was queued."
            )
            return None
        if start.resumed:
            self.stdout.write(
                f"Resuming assignment #{start.batch.pk}: {len(start.child_ids)} of {start.batch.rows} leads left."
            )
        return start.batch, start.child_ids

    def _validate(self, *, path: Path, raw: bytes, org: str | None) -> ParsedFile:
        text = csv_decode(raw=raw)
        if isinstance(text, RowError):
            self.stderr.write(str(text))
            raise CommandError(f"{path.name} is not UTF-8: nothing was loaded.")
        try:
            directory = owner_directory_load(organization=org)
        except Organization.DoesNotExist:
            known = (
                ", ".join(Organization.objects.order_by("name").values_list("name", flat=True)) or "none yet"
            )
            raise CommandError(f"--org {org!r}: no such organization (known: {known}).") from None
        parsed = parse_assignment_csv(text=text, owners=directory)
        if parsed.errors:
            for error in parsed.errors:
                self.stderr.write(str(error))
            lines = len({error.line for error in parsed.errors})
            raise CommandError(
                f"{path.name}: {len(parsed.errors)} problem(s) on {lines} line(s): nothing was loaded. "
                "Fix the lines above and run the command again."
            )
        return parsed

    def _fan_out(self, *, batch: AssignmentBatch, child_ids: list[int], timeout: float, advance: Any) -> None:
        intake_enqueue(batch_id=batch.pk, child_ids=child_ids)
        deadline, seen = time.monotonic() + timeout, assignment_progress(batch_id=batch.pk).children_done
        while True:
            # Nobody waits on the children: they complete the parent themselves; we only read it.
            current = assignment_progress(batch_id=batch.pk)
            advance(current.children_done - seen)
            seen = current.children_done
            if current.status == AssignmentBatch.Status.COMPLETED:
                return
            if time.monotonic() > deadline:
                raise CommandError(
                    f"Timed out after {timeout:g} s: {seen}/{current.children_total} leads done. Assignment "
                    f"#{batch.pk} completes by itself as the orchestrator workers finish (admin: Assignment "
                    "batches); re-running the file loads only what is still missing."
                )
            time.sleep(POLL_S)

    @contextmanager
    def _progress(self, *, total: int, quiet: bool) -> Iterator[Any]:
        console = Console(stderr=True)
        progress = Progress(
            TextColumn("Loading leads"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            disable=quiet or not console.is_terminal,
        )
        with progress:
            task = progress.add_task("load", total=total)
            yield lambda n: progress.advance(task, n)

    def _summary(self, *, batch_id: int, org_name: str, seconds: float) -> None:
        batch = assignment_progress(batch_id=batch_id)
        outcomes = assignment_outcomes(batch_id=batch_id)
        stopped = outcomes.get(AssignmentItem.Outcome.STOPPED, 0)
        self.stdout.write(
            self.style.SUCCESS(
                f"Assignment #{batch.pk} {batch.status}: {batch.rows} rows into {org_name}: "
                f"{batch.leads_created} new leads, {batch.leads_existing} existing kept with their owners"
                f"{f' ({stopped} replied/opted out/converted: nothing queued)' if stopped else ''}, "
                f"{batch.outreach_created} outreach queued, in {seconds:.1f} s."
            )
        )


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
