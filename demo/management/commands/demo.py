"""python manage.py demo [--for SECONDS]: the one-command main job (see demo/run.py)."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console

from demo.run import DemoOptions, run

# Seeding and the live view stay quick up to here; a bigger load is bench/soak.py's job.
MAX_LEADS = 100_000


class Command(BaseCommand):
    help = "Run the demo: LLM simulator, SMTP sink, web, a worker per queue, beat and Flower, with live progress."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--for", dest="seconds", type=float, default=None, help="Stop after SECONDS and write a report."
        )
        parser.add_argument(
            "--leads", type=int, default=2000, help=f"Leads to seed (default 2000, at most {MAX_LEADS:,})."
        )
        parser.add_argument("--keep", action="store_true", help="Keep the demo database from the last run.")
        parser.add_argument("--web-port", type=int, default=8000)
        parser.add_argument("--flower-port", type=int, default=5555)
        parser.add_argument("--sim-port", type=int, default=8900, help="Port of the LLM simulator.")
        parser.add_argument("--smtp-port", type=int, default=1025, help="Port of the SMTP sink.")
        parser.add_argument(
            "--report-dir", type=Path, default=Path("var/demo-report"), help="Where --for writes the report."
        )
        parser.add_argument(
            "--auto-approve-after",
            type=float,
            default=30.0,
            help="Approve drafts waiting this long (0: never).",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        if not settings.DEBUG:
            raise CommandError("The demo runs with DJANGO_DEBUG=1 (demo secrets); scripts/demo.sh sets it.")
        if opts["seconds"] is not None and not 0 < opts["seconds"] < math.inf:
            raise CommandError(f"--for {opts['seconds']}: give a positive number of seconds.")
        if not 0 <= opts["auto_approve_after"] < math.inf:
            raise CommandError(
                f"--auto-approve-after {opts['auto_approve_after']}: give seconds, 0 or more (0: never)."
            )
        for flag in ("web_port", "flower_port", "sim_port", "smtp_port"):
            if not 1 <= opts[flag] <= 65535:
                raise CommandError(f"--{flag.replace('_', '-')} {opts[flag]}: a port is between 1 and 65535.")
        if not 1 <= opts["leads"] <= MAX_LEADS:
            raise CommandError(
                f"--leads {opts['leads']}: give 1 to {MAX_LEADS:,} (the demo seeds and shows them all)."
            )
        self._fresh_database(keep=opts["keep"])
        call_command("migrate", verbosity=0)
        # SIGTERM (e.g. from a supervisor) stops the demo as cleanly as Ctrl-C.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        options = DemoOptions(
            seconds=opts["seconds"],
            leads=opts["leads"],
            web_port=opts["web_port"],
            flower_port=opts["flower_port"],
            sim_port=opts["sim_port"],
            smtp_port=opts["smtp_port"],
            auto_approve_after_s=opts["auto_approve_after"],
            report_dir=opts["report_dir"],
        )
        try:
            figures = run(opts=options, console=Console())
        except RuntimeError as exc:
            raise CommandError(str(exc)) from None
        if figures is not None:
            self.stdout.write(
                self.style.SUCCESS(f"Report written to {Path(settings.BASE_DIR) / options.report_dir}")
            )
            self.stdout.write(str(figures))
        self.stdout.write(self.style.SUCCESS("Demo stopped."))

    def _fresh_database(self, *, keep: bool) -> None:
        """Each demo starts clean on its own SQLite file; a configured database is never touched."""
        db = settings.DATABASES["default"]
        default = Path(settings.BASE_DIR) / "var" / "demo.sqlite3"
        if keep or db["ENGINE"] != "django.db.backends.sqlite3" or Path(str(db["NAME"])) != default:
            return
        for suffix in ("", "-wal", "-shm"):
            Path(f"{default}{suffix}").unlink(missing_ok=True)
