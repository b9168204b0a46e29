"""python manage.py pause [--org NAME] [--owner NAME] [--tier reply|intro|nudge]
[--sender-domain D] [--reason TEXT] [--by USERNAME]

Pause an organization, an owner, a tier or a sender domain (options combine: --org Acme --tier
nudge pauses Acme's nudges). Its queued work waits QUEUED (approved drafts APPROVED) saying
"paused by <user> at <time>" until `resume`; work already dispatched is put back by the worker.
Pausing a scope already paused changes nothing and says so. Exit status 1 with the reason on a
name that does not exist. docs/operators.md, "Pause and resume".
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from orchestrator.controls import pauses
from orchestrator.management.pause_scope import add_scope_arguments, scope_from, user_named


class Command(BaseCommand):
    help = "Pause an organization, owner, tier or sender domain by name until `resume`."

    def add_arguments(self, parser: CommandParser) -> None:
        add_scope_arguments(parser)
        parser.add_argument("--reason", default="", help="Why: shown on the waiting work and the dashboard.")
        parser.add_argument(
            "--by", metavar="USERNAME", help="Who is pausing (default: nobody; shown as 'automatically')."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        scope = scope_from(options)
        if scope.empty:
            raise CommandError("Say what to pause: --org NAME, --owner NAME, --tier or --sender-domain.")
        paused, created = pauses.pause(
            organization=scope.organization,
            owner=scope.owner,
            tier=scope.tier,
            sender_domain=scope.sender_domain,
            by=user_named(options["by"]),
            reason=options["reason"],
        )
        verb = "paused" if created else "already paused"
        self.stdout.write(f"{verb} #{paused.pk}: {paused.scope_text()} ({paused.blocked_reason()})")
