"""python manage.py resume [--org NAME] [--owner NAME] [--tier reply|intro|nudge]
[--sender-domain D] | --id N | --all  [--by USERNAME]

Lift pauses: the active pause of exactly that scope (the options of `pause`), the pause with
that id, or every active pause. Waiting work goes at the next dispatch cycle. Prints each pause
it lifted; exit status 1, listing the active pauses, when nothing matches.
docs/operators.md, "Pause and resume".
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from orchestrator.controls import pauses
from orchestrator.management.pause_scope import Scope, add_scope_arguments, scope_from, user_named
from orchestrator.models import Pause


class Command(BaseCommand):
    help = "Resume paused work: by scope (as `pause`), --id N or --all."

    def add_arguments(self, parser: CommandParser) -> None:
        add_scope_arguments(parser)
        parser.add_argument("--id", type=int, dest="pause_id", metavar="N", help="The pause with this id.")
        parser.add_argument("--all", action="store_true", dest="every", help="Every active pause.")
        parser.add_argument("--by", metavar="USERNAME", help="Who is resuming (default: nobody).")

    def handle(self, *args: Any, pause_id: int | None, every: bool, **options: Any) -> None:
        scope = scope_from(options)
        if sum((pause_id is not None, every, not scope.empty)) != 1:
            raise CommandError(
                "Say what to resume: scope options (--org, --owner, --tier, --sender-domain), --id N or --all."
            )
        found = _matching(scope=scope, pause_id=pause_id, every=every)
        if not found:
            active = "; ".join(f"#{p.pk} {p.scope_text()}" for p in pauses.active()) or "none"
            raise CommandError(f"No active pause matches; active pauses: {active}.")
        pauses.resume(pauses=found, by=user_named(options["by"]))
        for p in found:
            self.stdout.write(f"resumed #{p.pk}: {p.scope_text()} (was {p.blocked_reason()})")


def _matching(*, scope: Scope, pause_id: int | None, every: bool) -> list[Pause]:
    active = Pause.objects.filter(resumed_at__isnull=True).select_related(
        "organization", "owner", "created_by"
    )
    if every:
        return list(active.order_by("created_at", "id"))
    if pause_id is not None:
        return list(active.filter(pk=pause_id))
    organization = scope.owner.organization if scope.owner is not None else scope.organization
    return list(
        active.filter(
            organization=organization,
            owner=scope.owner,
            tier=None if scope.tier is None else int(scope.tier),
            sender_domain=scope.sender_domain,
        )
    )
