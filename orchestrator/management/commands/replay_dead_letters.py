"""python manage.py replay_dead_letters (--all | --org NAME | --id N) [--reason CLASS] [--dry-run]

A replay sends email and spends the LLM budget, so the command needs a scope stated on purpose:
--all (every open letter), --org NAME (that organization's), or --id N (one letter, explicit
enough on its own). --reason narrows a scope, it is not one. Without a scope it refuses, exits
non-zero and writes nothing. A "possibly sent" letter waits for a person to confirm the
prospect did not get the email: --all and --org skip it unless --reason possibly_sent names
the class (or --id the letter).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db.models import QuerySet

from orchestrator.failures.dead_letters import (
    ACTIONABLE,
    DeadLetterNotActionable,
    dead_letter_replay,
    replay_target,
)
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Organization, State

NO_SCOPE = (
    "Say which dead letters to replay: --all, --org NAME or --id N "
    "(--reason only narrows one of those). Nothing was replayed."
)


class Command(BaseCommand):
    help = (
        "Replay open dead letters: generation failures go back to the queue, send failures to the "
        "approved-send path (no second LLM call), with the original idempotency key. Safe to re-run."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        scope = parser.add_mutually_exclusive_group()
        scope.add_argument("--all", action="store_true", dest="every", help="Every open dead letter.")
        scope.add_argument("--org", help="Only the open dead letters of this organization (its name).")
        parser.add_argument("--reason", help=f"Only this failure class: {', '.join(ErrorClass.values)}.")
        parser.add_argument(
            "--id", type=int, dest="letter_id", help="Only this dead letter (also an escalated one)."
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="Say what would be replayed; change nothing."
        )

    def handle(
        self,
        *args: Any,
        reason: str | None,
        letter_id: int | None,
        dry_run: bool,
        every: bool,
        org: str | None,
        **options: Any,
    ) -> None:
        letters = self._select(reason=reason, letter_id=letter_id, every=every, org=org)
        if not letters:
            self.stdout.write("Nothing to replay: no open dead letters match.")
            return
        replayed, skipped = 0, []
        for letter in letters:
            try:
                target = self._replay_one(
                    letter=letter, reason=reason, dry_run=dry_run, named=letter_id is not None
                )
            except DeadLetterNotActionable as exc:
                skipped.append(f"#{letter.pk}: {exc}")
                continue
            replayed += 1
            verb = "Would replay" if dry_run else "Replayed"
            self.stdout.write(
                f"{verb} #{letter.pk} (outreach {letter.outreach_id}, {letter.job_type}) -> {target}"
            )
        self._summary(replayed=replayed, skipped=skipped, dry_run=dry_run)

    def _select(
        self, *, reason: str | None, letter_id: int | None, every: bool, org: str | None
    ) -> list[DeadLetter]:
        if reason is not None and reason not in ErrorClass.values:
            raise CommandError(
                f"--reason {reason!r} is not a failure class; use one of: {', '.join(ErrorClass.values)}."
            )
        if not (every or org is not None or letter_id is not None):
            raise CommandError(NO_SCOPE)
        letters: QuerySet[DeadLetter] = DeadLetter.objects.select_related("outreach").order_by("id")
        if letter_id is not None:
            # Any status: a letter named by id that cannot be replayed is reported, not hidden.
            found = list(letters.filter(pk=letter_id))
            if not found:
                raise CommandError(f"--id {letter_id}: there is no dead letter with that id.")
            return found
        if org is not None:
            org_id = Organization.objects.filter(name=org).values_list("id", flat=True).first()
            if org_id is None:
                raise CommandError(f"--org {org!r}: there is no organization with that name.")
            letters = letters.filter(organization_id_ref=org_id)
        elif reason is None:
            self.stdout.write("--all: replaying every open dead letter.")
        letters = letters.filter(status=DeadLetter.Status.OPEN)
        return list(letters.filter(failure_class=reason) if reason else letters)

    def _replay_one(self, *, letter: DeadLetter, reason: str | None, dry_run: bool, named: bool) -> State:
        unconfirmed = letter.failure_class == ErrorClass.POSSIBLY_SENT
        if unconfirmed and not named and reason != ErrorClass.POSSIBLY_SENT:
            raise DeadLetterNotActionable(
                "possibly sent: confirm the prospect did not get it, then replay it with --id "
                "or --reason possibly_sent",
                dead_letter_id=letter.pk,
                status=letter.status,
            )
        if reason and letter.failure_class != reason:
            raise DeadLetterNotActionable(
                f"its failure class is {letter.failure_class}, not {reason}",
                dead_letter_id=letter.pk,
                status=letter.status,
            )
        if not dry_run:
            return State(dead_letter_replay(dead_letter=letter).state)
        if letter.status not in ACTIONABLE or letter.outreach.state != State.DEAD:
            raise DeadLetterNotActionable(
                f"it is {letter.status} and its outreach is {letter.outreach.state}",
                dead_letter_id=letter.pk,
                status=letter.status,
            )
        return replay_target(outreach=letter.outreach, failure_class=letter.failure_class)

    def _summary(self, *, replayed: int, skipped: list[str], dry_run: bool) -> None:
        verb = "would be replayed" if dry_run else "replayed"
        self.stdout.write(f"{replayed} dead letter(s) {verb}; {len(skipped)} skipped.")
        for line in skipped:
            self.stdout.write(f"  skipped {line}")
