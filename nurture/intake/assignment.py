"""Bulk lead assignment: the parent batch, one child per lead, children processed in chunks.

Fan-out / fan-in without anyone waiting: `assignment_create` persists the parent and every
validated row as a PENDING child (the intent, before any work), then chunks of children are
processed (in the command's own process, or by Celery workers with --fan-out; the same
function either way). A chunk writes its leads and their sequences, marks its children DONE
and adds them to the parent's counter in the same transaction; the conditional UPDATE that
sees `children_done = children_total` completes the parent. Re-processing a chunk (a redelivered
task) finds no PENDING children and does nothing; re-running a file whose batch never finished
(a crash, a timeout) resumes that batch's PENDING children.

Writes are set-based (nurture.intake.assignment_sql): a chunk of 1,000 leads costs about eight
queries, never one per row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, TypeVar

from django.db import transaction
from django.db.models import Count, F
from django.utils import timezone

from nurture.intake import assignment_sql
from nurture.intake.cadence import nudge_times, parse_nudge_days
from nurture.intake.csv_file import LeadRow, OwnerDirectory, OwnerRef
from outreach.models import AssignmentBatch, AssignmentItem, Lead, Organization, Outreach, Owner

CHUNK_SIZE = 1000  # children per transaction: short locks, a visible progress step, ~8 queries
LOOKUP_SIZE = 5000  # values per `IN (...)` lookup
INSERT_BATCH = 2000
T = TypeVar("T")


@dataclass(frozen=True)
class AssignmentPlan:
    """What loading a file would do, read before anything is written."""

    rows: int
    new_leads: int
    existing_leads: int
    existing_without_sequence: int

    @property
    def nothing_to_do(self) -> bool:
        return self.new_leads == 0 and self.existing_without_sequence == 0


def assignment_plan(*, organization_id: int, rows: Sequence[LeadRow]) -> AssignmentPlan:
    existing = _lead_statuses(organization_id=organization_id, emails=[row.email for row in rows])
    active = [lead_id for lead_id, status in existing.values() if status == Lead.Status.ACTIVE]
    return AssignmentPlan(
        rows=len(rows),
        new_leads=len(rows) - len(existing),
        existing_leads=len(existing),
        existing_without_sequence=len(active) - len(_with_intro(lead_ids=active)),
    )


def assignment_create(
    *, organization_id: int, file_name: str, file_sha256: str, rows: Sequence[LeadRow], now: datetime
) -> tuple[AssignmentBatch, list[int]]:
    """Persist the parent and its PENDING children (the validated rows); return them and the child ids."""
    with transaction.atomic():
        batch = AssignmentBatch.objects.create(
            organization_id=organization_id,
            file_name=file_name[-500:],
            file_sha256=file_sha256,
            rows=len(rows),
            children_total=len(rows),
            created_at=now,
        )
        children = AssignmentItem.objects.bulk_create(
            (
                AssignmentItem(
                    batch=batch,
                    line=row.line,
                    email=row.email,
                    first_name=row.first_name,
                    last_name=row.last_name,
                    company=row.company,
                    title=row.title,
                    timezone=row.timezone,
                    owner_id=row.owner_id,
                )
                for row in rows
            ),
            batch_size=INSERT_BATCH,
        )
    return batch, [child.pk for child in children]


def assignment_chunks(*, child_ids: Sequence[int], size: int = CHUNK_SIZE) -> list[tuple[int, int]]:
    """(first id, last id) ranges of at most `size` children: what a chunk task carries (ids only)."""
    ids = sorted(child_ids)
    return [(ids[i], ids[min(i + size, len(ids)) - 1]) for i in range(0, len(ids), size)]


def assignment_run(
    *, batch_id: int, child_ids: Sequence[int], on_chunk: Callable[[int], None] | None = None
) -> None:
    """Process every chunk here, in this process (the command's default)."""
    for first_id, last_id in assignment_chunks(child_ids=child_ids):
        done = assignment_chunk_process(batch_id=batch_id, first_id=first_id, last_id=last_id)
        if on_chunk:
            on_chunk(done)


def assignment_chunk_process(*, batch_id: int, first_id: int, last_id: int) -> int:
    """Write the leads and sequences of the PENDING children in [first_id, last_id]; return how many.

    The children are locked FOR UPDATE (not SKIP LOCKED): a duplicate delivery of the same chunk
    waits, then finds them DONE and does nothing; if the first one rolled back, it does the work.
    """
    with transaction.atomic():
        children = list(
            AssignmentItem.objects.select_for_update()
            .filter(
                batch_id=batch_id, id__gte=first_id, id__lte=last_id, status=AssignmentItem.Status.PENDING
            )
            .order_by("id")
            .values_list("id", "email")
        )
        if not children:
            return 0
        batch = AssignmentBatch.objects.only("organization_id", "created_at").get(id=batch_id)
        org_id, now, child_ids = batch.organization_id, timezone.now(), [c[0] for c in children]
        new_ids = assignment_sql.leads_insert(organization_id=org_id, child_ids=child_ids, now=now)
        leads = _chunk_leads(organization_id=org_id, emails=[c[1] for c in children])
        planned = _needing_sequence(leads=leads, new_ids=new_ids)
        outreach_created = assignment_sql.sequences_insert(
            lead_ids=[lead.id for lead in planned],
            schedule=_schedule(organization_id=org_id, leads=planned, assigned_at=batch.created_at),
            now=now,
        )
        assignment_sql.children_done(
            child_ids=child_ids, lead_ids=[lead.id for lead in leads], new_ids=new_ids, now=now
        )
        _parent_signal(
            batch_id=batch_id,
            done=len(children),
            leads_created=len(new_ids),
            leads_existing=len(children) - len(new_ids),
            outreach_created=outreach_created,
        )
    return len(children)


def assignment_unfinished(
    *, organization_id: int, file_sha256: str
) -> tuple[AssignmentBatch, list[int]] | None:
    """The latest unfinished batch of this very file (same bytes) and its PENDING child ids, if any."""
    batch = (
        AssignmentBatch.objects.filter(
            organization_id=organization_id, file_sha256=file_sha256, status=AssignmentBatch.Status.LOADING
        )
        .order_by("-id")
        .first()
    )
    if batch is None:
        return None
    pending = AssignmentItem.objects.filter(batch=batch, status=AssignmentItem.Status.PENDING)
    return batch, list(pending.order_by("id").values_list("id", flat=True))


@dataclass(frozen=True)
class AssignmentStart:
    """What loading a validated file starts: this file's unfinished batch (`resumed`), a new
    batch, or nothing (`batch` None: every lead is already assigned with its sequence)."""

    batch: AssignmentBatch | None
    child_ids: list[int]
    resumed: bool
    plan: AssignmentPlan | None


def assignment_start(
    *, organization_id: int, file_name: str, file_sha256: str, rows: Sequence[LeadRow], now: datetime
) -> AssignmentStart:
    """The batch to work on for a validated file (the command and the admin's upload alike):
    re-sending a file whose batch never finished resumes it, a file with nothing new creates
    nothing, anything else a new batch with its PENDING children."""
    unfinished = assignment_unfinished(organization_id=organization_id, file_sha256=file_sha256)
    if unfinished:
        return AssignmentStart(batch=unfinished[0], child_ids=unfinished[1], resumed=True, plan=None)
    plan = assignment_plan(organization_id=organization_id, rows=rows)
    if plan.nothing_to_do:
        return AssignmentStart(batch=None, child_ids=[], resumed=False, plan=plan)
    batch, child_ids = assignment_create(
        organization_id=organization_id, file_name=file_name, file_sha256=file_sha256, rows=rows, now=now
    )
    return AssignmentStart(batch=batch, child_ids=child_ids, resumed=False, plan=plan)


def assignment_progress(*, batch_id: int) -> AssignmentBatch:
    return AssignmentBatch.objects.get(id=batch_id)


def assignment_outcomes(*, batch_id: int) -> dict[str, int]:
    """Children per outcome (new / existing / stopped) of a batch."""
    rows = (
        AssignmentItem.objects.filter(batch_id=batch_id, status=AssignmentItem.Status.DONE)
        .values_list("outcome")
        .annotate(n=Count("id"))
        .order_by()
    )
    return dict(rows)


def owner_directory_load(*, organization: str | None) -> OwnerDirectory:
    """The owners a file may name: those of `organization`, or of every organization if None.

    Raises Organization.DoesNotExist for an unknown organization name.
    """
    owners = Owner.objects.select_related("organization")
    if organization is not None:
        owners = owners.filter(organization=Organization.objects.get(name=organization))
    return OwnerDirectory(
        owners=[
            OwnerRef(o.pk, o.name, o.organization_id, o.organization.name, o.active)
            for o in owners.iterator()
        ]
    )


# --- the steps of a chunk ---------------------------------------------------------------------


class ChunkLead(NamedTuple):
    id: int
    owner_id: int
    timezone: str
    status: str


def _chunk_leads(*, organization_id: int, emails: Sequence[str]) -> list[ChunkLead]:
    # (organization, email) is the lead's unique index: one index probe per email.
    rows = Lead.objects.filter(organization_id=organization_id, email__in=emails)
    return [ChunkLead(*row) for row in rows.values_list("id", "owner_id", "timezone", "status")]


def _needing_sequence(*, leads: Sequence[ChunkLead], new_ids: set[int]) -> list[ChunkLead]:
    """New leads, and active existing leads that never had an intro (created outside intake).

    Existing leads keep their owner and their sequence: a lead is introduced once.
    """
    active = [lead for lead in leads if lead.status == Lead.Status.ACTIVE]
    with_intro = _with_intro(lead_ids=[lead.id for lead in active if lead.id not in new_ids])
    return [lead for lead in active if lead.id not in with_intro]


def _schedule(
    *, organization_id: int, leads: Sequence[ChunkLead], assigned_at: datetime
) -> list[tuple[int, str, int, datetime]]:
    """(owner, time zone, step, due) for each (owner, zone) among `leads`.

    A chunk has a handful of such pairs, so the business-day arithmetic runs per pair, not per lead.
    """
    pairs = sorted({(lead.owner_id, lead.timezone) for lead in leads})
    cadences = _cadences(organization_id=organization_id, owner_ids={owner for owner, _ in pairs})
    schedule = []
    for owner_id, zone in pairs:
        schedule.append((owner_id, zone, 0, assigned_at))
        dues = nudge_times(assigned_at=assigned_at, tz=zone, days=cadences[owner_id])
        schedule += [(owner_id, zone, step, due) for step, due in enumerate(dues, start=1)]
    return schedule


def _parent_signal(
    *, batch_id: int, done: int, leads_created: int, leads_existing: int, outreach_created: int
) -> None:
    """Fan-in: count this chunk's children; the chunk that brings the count to the total completes the parent.

    The first UPDATE locks the parent row until this transaction commits, so chunks finishing
    together add up in turn and exactly one of them sees done == total.
    """
    AssignmentBatch.objects.filter(id=batch_id).update(
        children_done=F("children_done") + done,
        leads_created=F("leads_created") + leads_created,
        leads_existing=F("leads_existing") + leads_existing,
        outreach_created=F("outreach_created") + outreach_created,
    )
    AssignmentBatch.objects.filter(
        id=batch_id, status=AssignmentBatch.Status.LOADING, children_done=F("children_total")
    ).update(status=AssignmentBatch.Status.COMPLETED, completed_at=timezone.now())


# --- reads ------------------------------------------------------------------------------------


def _lead_statuses(*, organization_id: int, emails: Sequence[str]) -> dict[str, tuple[int, str]]:
    """email -> (lead id, status) of the organization's leads among `emails`."""
    found: dict[str, tuple[int, str]] = {}
    for chunk in _chunked(emails, LOOKUP_SIZE):
        rows = Lead.objects.filter(organization_id=organization_id, email__in=chunk)
        found.update(
            (email, (lead_id, status)) for lead_id, email, status in rows.values_list("id", "email", "status")
        )
    return found


def _with_intro(*, lead_ids: Sequence[int]) -> set[int]:
    """Leads whose sequence was already planned: they have an intro (of any state)."""
    found: set[int] = set()
    for chunk in _chunked(lead_ids, LOOKUP_SIZE):
        found.update(
            Outreach.objects.filter(lead_id__in=chunk, kind=Outreach.Kind.INTRO).values_list(
                "lead_id", flat=True
            )
        )
    return found


def _cadences(*, organization_id: int, owner_ids: Iterable[int]) -> dict[int, tuple[int, ...]]:
    """Each owner's nudge days: its own if set, else the organization's."""
    org_days = Organization.objects.values_list("nudge_days", flat=True).get(id=organization_id)
    own = dict(Owner.objects.filter(id__in=list(owner_ids)).values_list("id", "nudge_days"))
    return {owner_id: parse_nudge_days(value=days or org_days) for owner_id, days in own.items()}


def _chunked(values: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]
