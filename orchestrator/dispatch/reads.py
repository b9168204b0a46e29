"""Reads for the dispatch cycle. Every query is bounded by slots and active owners, never by
queue depth: each uses a partial index of outreach/models/outreach.py and stops after k rows
per owner.

Also the organizations' own LLM caps (Organization.llm_rpm / llm_tpm), which every user of the
budget loads before touching a capped scope (a scope without limits can be neither reserved,
settled nor refunded): the dispatch cycle first thing (its stuck recovery refunds), and a
generation job whose reservation names one (`job_scopes`).

PostgreSQL runs the per-owner top-k as one LATERAL join; SQLite (the demo's embedded default)
has no LATERAL, so it runs the same query with ROW_NUMBER() over the chosen owners instead.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from types import MappingProxyType
from typing import Any, NamedTuple, TypeVar

from django.db import connection
from django.db.models import BooleanField, Count, ExpressionWrapper, Q, QuerySet

from orchestrator.budget import (
    PROVIDER,
    Budget,
    Limits,
    deployment_limits,
    organization_limits,
    organization_scope,
    reservation_scopes,
)
from orchestrator.controls import pauses
from orchestrator.controls.mailboxes import mailboxes_of
from orchestrator.controls.spend import spend_day
from orchestrator.dispatch.owner_limits import OwnerRules, local_day_start
from orchestrator.dispatch.selection import Candidate, OwnerIds
from orchestrator.dispatch.selection.admission import SpendFacts
from outreach.models import (
    SUPPRESSED,
    Lead,
    Mailbox,
    Organization,
    Outreach,
    Owner,
    OwnerDailySends,
    OwnersVersion,
    State,
    any_of,
    int_array,
)
from outreach.tiers import Tier
from outreach.transitions import IN_FLIGHT, LLM_IN_FLIGHT

log = logging.getLogger(__name__)
T = TypeVar("T")
TABLE = Outreach._meta.db_table


@dataclass(frozen=True, slots=True)
class ActiveOwner:
    """An active owner as the cycle needs it: its rules, weight and what admission asks of it."""

    rules: OwnerRules
    weight: int
    organization_id: int
    sender_domain: str
    review_required: bool
    draft_ahead_days: int


@dataclass(frozen=True, slots=True)
class CappedOwners:
    """The active owners of organizations with their own LLM cap: the budget groups."""

    scopes: Mapping[int, str]  # owner id -> its organization's budget scope
    members: Mapping[str, OwnerIds]  # scope -> its owners


@dataclass(frozen=True, slots=True)
class ActiveOwners:
    """Every active owner as the cycle needs it (`active_owners`): the round orders and the
    budget groups need every owner's weight and organization, admission the rest of the row
    of those a cycle judges (`of`: its window)."""

    owners: Mapping[int, ActiveOwner]  # owner id -> its row, as admission reads it
    # organization id -> its daily spend cap (Organization.daily_spend_cap), for those of these
    # owners' organizations with one: read with the owners (an organization's write renews
    # their version), not asked every cycle
    spend_caps: Mapping[int, Decimal] = field(default_factory=dict)
    # owner id -> its mailboxes, paused ones included (controls.mailboxes.mailboxes_of: owners
    # with none are absent), for admission's rule 4 (mailbox_room_today)
    mailboxes: Mapping[int, Sequence[Mailbox]] = field(default_factory=dict)
    weights: Mapping[int, int] = field(init=False)  # owner id -> its weight (from `owners`)
    ids: OwnerIds = field(init=False)  # the owners' ids (from `owners`), for the round orders
    # the last `capped` answer and the capped scopes it was for: caps seldom change, and mapping
    # 10,000 owners took 0.7 ms a cycle, grouping them another 0.9
    _capped: list[tuple[frozenset[str], CappedOwners]] = field(
        init=False, default_factory=list, repr=False, compare=False
    )
    _members: dict[int, list[int]] = field(init=False, default_factory=dict, repr=False, compare=False)
    _on_domain: dict[str, list[int]] = field(init=False, default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        # read-only: the schedule remembers the distinct weights of these by identity
        # (selection.schedule.weight_steps), since they stand while the active owners do
        weights = MappingProxyType({o: owner.weight for o, owner in self.owners.items()})
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "ids", OwnerIds(self.owners))

    def capped(self, caps: Mapping[str, Limits]) -> CappedOwners:
        """The owners of organizations in `caps` (the selection's budget groups): each one's
        organization's budget scope, and each scope's owners in id order."""
        key = frozenset(caps)
        if self._capped and self._capped[0][0] == key:
            return self._capped[0][1]
        scopes: dict[int, str] = {}
        if key:
            orgs = {owner.organization_id for owner in self.owners.values()}
            by_org = {org: scope for org in orgs if (scope := organization_scope(org)) in key}
            scopes = {
                o: by_org[a.organization_id]
                for o, a in sorted(self.owners.items())
                if a.organization_id in by_org
            }
        members: dict[str, list[int]] = {}
        for owner, scope in scopes.items():
            members.setdefault(scope, []).append(owner)
        capped = CappedOwners(scopes=scopes, members={scope: OwnerIds(ids) for scope, ids in members.items()})
        self._capped[:] = [(key, capped)]
        return capped

    def organization_members(self, organization_id: int) -> Sequence[int]:
        """Its owners among these, in id order (grouped once for every organization: they
        stand while the active owners do)."""
        if not self._members and self.owners:
            for owner_id in sorted(self.owners):
                self._members.setdefault(self.owners[owner_id].organization_id, []).append(owner_id)
        return self._members.get(organization_id, ())

    def domain_members(self, domain: str) -> Sequence[int]:
        """Its owners among these without a mailbox of their own (they send from their
        organization's sender `domain`), in id order; grouped once, as `organization_members`."""
        if not self._on_domain and self.owners:
            for owner_id in sorted(self.owners):
                if owner_id not in self.mailboxes:
                    self._on_domain.setdefault(self.owners[owner_id].sender_domain, []).append(owner_id)
        return self._on_domain.get(domain, ())

    def of(self, owner_ids: Iterable[int]) -> list[ActiveOwner]:
        """These owners (those active among them), in id order, for admission."""
        return [self.owners[o] for o in sorted({o for o in owner_ids if o in self.owners})]


ACTIVE_OWNER_FIELDS = (
    "id",
    "daily_limit",
    "hours_start",
    "hours_end",
    "working_days",
    "timezone",
    "weight",
    "organization_id",
    "review_required",
    "draft_ahead_days",
)


@dataclass(frozen=True, slots=True)
class _Kept:
    """A read as this process last made it, and the owners' version then (with what else the
    read depends on, for one that depends on more: `active_pauses_load`)."""

    version: object
    value: Any


# read's name -> what it answered while the owners' version holds (`_while_version_holds`)
_kept: dict[str, _Kept] = {}


def _while_version_holds(name: str, read: Callable[[], T]) -> T:
    """What `read()` answers, read again only when a statement wrote owners, organizations,
    mailboxes or mailboxes' owners since this process last read it: one row says whether any
    did (`owners_version`, read first, so a change committed between the two reads is read
    again next time, never missed). Without a version (SQLite, or no write since the table was
    emptied) it is read every time."""
    return _kept_under(owners_version(), name, read)


def _kept_under(version: object | None, name: str, read: Callable[[], T]) -> T:
    """`_while_version_holds` against a version the caller read (first)."""
    kept = _kept.get(name)
    if version is not None and kept is not None and kept.version == version:
        return kept.value
    value = read()
    if version is None:
        _kept.pop(name, None)
    else:
        _kept[name] = _Kept(version=version, value=value)
    return value


def active_owners() -> ActiveOwners:
    """Every active owner (`ActiveOwners`), its mailboxes and its organization's spend cap, read
    whole only when an owner, an organization, a mailbox or a mailbox's owners changed since
    this process last read them (`_while_version_holds`). At 10,000
    owners the read took 7 ms a cycle, and the window's rows another 5 (bench/dispatch.py,
    2026-12-06); the window's mailboxes (their links and rows) 3.7 ms of a cycle, 1.7 at 10
    owners (bench/dispatch.py --controls, one owner in two on a mailbox, 2026-12-06)."""
    return _while_version_holds("active owners", _active_owners_read)


def owners_version() -> str | None:
    """The owners' version: a token renewed, in the writer's transaction, by every statement
    that writes owners, organizations, mailboxes or their owners (OwnersVersion's triggers,
    PostgreSQL); None without."""
    if connection.vendor != "postgresql":
        return None
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT token::text FROM {OwnersVersion._meta.db_table} WHERE id = 1")
        row = cursor.fetchone()
    return None if row is None else str(row[0])


def _active_owners_read() -> ActiveOwners:
    """Every active owner's row and its organization's sender domain (one read), and their
    mailboxes (mailboxes_of: one read of the links, one of the mailboxes)."""
    return _owners_read(Owner.objects.filter(active=True))


def owners_gone(owner_ids: Collection[int]) -> ActiveOwners:
    """The owners among these deactivated (their work in flight and drafts, started before,
    still run and leave from their sender domains: rule 6 counts them), read as the active
    ones are; nothing read when there are none (most cycles)."""
    if not owner_ids:
        return ActiveOwners(owners={})
    return _owners_read(Owner.objects.filter(id__any=sorted(owner_ids), active=False))


def _owners_read(owners_of: QuerySet[Owner]) -> ActiveOwners:
    rows = owners_of.order_by(
        "id"
    ).values_list(  # in id order: the rounds sort them so (selection.round_order), in linear time then
        *ACTIVE_OWNER_FIELDS, "organization__sender_email", "organization__daily_spend_cap"
    )
    domains: dict[str, str] = {}  # sender address -> its domain, once per organization
    owners: dict[int, ActiveOwner] = {}
    spend_caps: dict[int, Decimal] = {}
    for row in rows:
        if row[10] not in domains:
            domains[row[10]] = Organization(sender_email=row[10]).sender_domain
        owners[row[0]] = ActiveOwner(OwnerRules(*row[:6]), row[6], row[7], domains[row[10]], row[8], row[9])
        if row[11] is not None:
            spend_caps[row[7]] = row[11]
    return ActiveOwners(owners=owners, mailboxes=mailboxes_of(owner_ids=owners), spend_caps=spend_caps)


def active_owner_ids() -> list[int]:
    """The active owners' ids (one indexed read)."""
    return list(Owner.objects.filter(active=True).values_list("id", flat=True))


class Committed(NamedTuple):
    """What an owner has committed: sent in its local day, in flight, drafts not yet sent (a
    tuple: one an owner judged)."""

    sent: int = 0
    in_flight: int = 0
    drafts: int = 0


# Written and not sent: awaiting approval, or approved and waiting for `send`.
DRAFTS = (State.AWAITING_APPROVAL, State.APPROVED)


@dataclass(frozen=True, slots=True)
class CommittedWork:
    """Per owner, its rows in flight and its drafts not yet sent (`committed_work`), read once
    a cycle: admission counts every owner's on the sender domains' days (rule 6), judged or
    not; the window judges the owners with approved drafts (`approved`: they are sent). And
    the LLM jobs in flight of every owner (`llm_in_flight`, counted in the same read): the
    window's slot bound and the cycle's slots."""

    in_flight: Mapping[int, int]
    drafts: Mapping[int, int]  # awaiting approval and approved
    approved: Mapping[int, int] = field(default_factory=dict)
    llm_in_flight: int = 0

    def owners(self) -> set[int]:
        return {*self.in_flight, *self.drafts}


def committed_work_load() -> CommittedWork:
    """`committed_work` counted per owner: one pass over the partial indexes of those states,
    bounded by the work in flight and the drafts, not by the owners or the history."""
    in_flight: Counter[int] = Counter()
    drafts: Counter[int] = Counter()
    approved: Counter[int] = Counter()
    llm = 0
    for owner_id, state, llm_job, n in committed_work():
        (drafts if state in DRAFTS else in_flight)[owner_id] += n
        if state == State.APPROVED:
            approved[owner_id] += n
        llm += n if llm_job else 0
    return CommittedWork(in_flight=in_flight, drafts=drafts, approved=approved, llm_in_flight=llm)


def committed_today(
    *, owners: Iterable[OwnerRules], now: datetime, work: CommittedWork | None = None
) -> dict[int, Committed]:
    """Per owner: emails sent in its local day, those on their way out, and drafts not yet sent.

    Sent: one OwnerDailySends row per owner (kept by the SENT transition), not a count of the
    day's sent rows, so the cost follows the number of owners and not the day's history.
    In flight and drafts: `work` (the cycle's, read once), else `committed_work_load`: one
    pass over the partial in-flight, awaiting-approval and approved indexes, whose sizes the
    in-flight cap and the admission (drafts within an owner's days) bound, with no owner
    filter: filtering by owner lets the planner walk each owner's whole history through the
    owner index instead.
    """
    days: dict[date, list[int]] = defaultdict(list)
    for rules in owners:
        days[local_day_start(tz=rules.timezone, now=now).date()].append(rules.owner_id)
    if not days:
        return {}
    # Written by hand, not built by the ORM each cycle (~0.6 ms at 500 owners, 2026-12-07).
    where, params = [], []
    day_field = OwnerDailySends._meta.get_field("day")
    for day, ids in days.items():
        among, of_ids = any_of("owner_id", ids, vendor=connection.vendor)
        where.append(f"(day = %s AND {among})")
        params += [day_field.get_db_prep_value(day, connection), *of_ids]
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT owner_id, sent FROM {OwnerDailySends._meta.db_table} WHERE {' OR '.join(where)}", params
        )
        sent = dict(cursor.fetchall())
    work = work or committed_work_load()
    return {
        o: Committed(sent.get(o, 0), work.in_flight.get(o, 0), work.drafts.get(o, 0))
        for ids in days.values()
        for o in ids
    }


def committed_work() -> QuerySet[Outreach, tuple[int, str, bool, int]]:
    """(owner id, state, whether they are LLM jobs (`LLM_JOBS`), rows) of every owner's work in
    flight and drafts not yet sent.

    One arm per partial index (in flight, awaiting approval, approved), OR-ed: PostgreSQL
    matches each arm to its index's predicate and ORs the bitmaps. `state IN (all five)` matches
    no index's predicate, and the planner scanned the whole table, history included (89 ms a
    cycle at 10^6 rows, growing with it)."""
    return (
        Outreach.objects.filter(
            Q(state__in=IN_FLIGHT) | Q(state=State.AWAITING_APPROVAL) | Q(state=State.APPROVED)
        )
        .annotate(llm_job=ExpressionWrapper(LLM_JOBS, output_field=BooleanField()))
        .values_list("owner_id", "state", "llm_job")
        .annotate(n=Count("id"))
        .order_by()
    )


def organization_caps() -> Mapping[str, Limits]:
    """Budget scope -> limits of every organization with its own LLM cap (Organization.llm_rpm /
    llm_tpm, see budget.organization_limits), read again only when an organization (or an
    owner, a mailbox) was written since (`_while_version_holds`): the dispatcher reads them
    every cycle and a worker for each capped job, and at a thousand capped organizations the
    read was 12.7 ms (bench/dispatch.py --organizations 1000, 2026-12-07)."""
    return MappingProxyType(_while_version_holds("organization caps", _organization_caps_read))


def _organization_caps_read() -> dict[str, Limits]:
    caps: dict[str, Limits] = {}
    rows = Organization.objects.filter(Q(llm_rpm__isnull=False) | Q(llm_tpm__isnull=False))
    for org_id, rpm, tpm in rows.values_list("id", "llm_rpm", "llm_tpm"):
        try:
            caps[organization_scope(org_id)] = organization_limits(rpm=rpm, tpm=tpm)
        except ValueError as exc:  # the admin refuses such caps; one written around it is not applied
            log.error("organization %s: LLM cap ignored: %s", org_id, exc, extra={"organization_id": org_id})
    return caps


def organization_caps_load(*, budget: Budget) -> Mapping[str, Limits]:
    """Read the organizations' caps (`organization_caps`) and give them to `budget` with the
    deployments' limits."""
    return _caps_give(organization_caps(), budget=budget)


def owners_and_caps_load(*, budget: Budget) -> tuple[ActiveOwners, Mapping[str, Limits]]:
    """`active_owners` and `organization_caps_load` against one read of the owners' version:
    what a dispatch cycle reads first."""
    version = owners_version()
    owners = _kept_under(version, "active owners", _active_owners_read)
    caps = MappingProxyType(_kept_under(version, "organization caps", _organization_caps_read))
    return owners, _caps_give(caps, budget=budget)


def active_pauses_load(scopes: Sequence[pauses.PauseScope]) -> pauses.ActivePauses:
    """The active pauses as admission judges owners by them (pauses.active_pauses), loaded
    again only when their scopes (`scopes`: a cycle reads them every time, one plain read) or
    the owners' version the cycle read first (`owners_and_caps_load`: their reasons name owners
    and organizations) changed. At 1,000 organizations, each with a pause of its own, loading
    and indexing them was 79 ms of a 505 ms cycle (bench/dispatch.py --organizations 1000,
    2026-12-07, session 41, a slow evening)."""
    owners = _kept.get("active owners")
    version = None if owners is None else (owners.version, tuple(scopes))
    return _kept_under(version, "active pauses", pauses.active_pauses)


def _caps_give(caps: Mapping[str, Limits], *, budget: Budget) -> Mapping[str, Limits]:
    budget.set_scope_limits({**deployment_limits(), **caps})
    return caps


def job_scopes(*, budget: Budget, reservation_id: str) -> tuple[str, ...]:
    """The scopes a job's calls, settle and refund use: those its reservation was made in (the
    dispatcher's decision, named by the id), with their caps loaded into `budget`. A cap
    removed since is dropped: the provider's limit still holds, and that reservation expires."""
    scopes = reservation_scopes(reservation_id)
    if scopes == (PROVIDER,):
        return scopes
    caps = organization_caps_load(budget=budget)
    return tuple(
        scope for scope in scopes if scope == PROVIDER or scope in caps or scope in budget.scope_limits
    )


def organization_spend(
    *,
    organization_ids: Iterable[int],
    now: datetime,
    job_cost: Callable[[int, str | None], Decimal],
    spend_caps: Mapping[int, Decimal],
) -> dict[int, SpendFacts]:
    """Per organization with a daily spend cap among these (`spend_caps`: the caps, as
    `ActiveOwners.spend_caps` keeps them): the cap, what it spent in the UTC day of `now`, and
    what its LLM jobs in flight (not yet costed) reserve, each at `job_cost(owner id, kind)`.
    Two queries whatever the number of organizations: their spend today (index
    outreach_spend_by_owner: their owners' drafts written today) and their jobs in flight per
    owner and kind (the partial in-flight index); no cap, no query (until 2026-12-07 a third
    read the caps every cycle)."""
    start, _ = spend_day(now)
    caps = {org: spend_caps[org] for org in set(organization_ids) if org in spend_caps}
    if not caps:
        return {}
    spent: dict[int, Decimal] = {}
    reserved: dict[int, Decimal] = defaultdict(Decimal)
    cost = Outreach._meta.get_field("llm_cost")
    marks = ", ".join(["%s"] * len(caps))
    with connection.cursor() as cursor:
        cursor.execute(
            _SPEND.format(organizations=marks),
            [
                *caps,
                Outreach._meta.get_field("generated_at").get_db_prep_value(start, connection),
                *caps,
                *(str(state) for state in LLM_IN_FLIGHT),
            ],
        )
        for org_id, owner, kind, total, jobs in cursor.fetchall():
            if owner is None:  # the day's spend, as text: exact (SQLite sums floats: rounded as the field is)
                spent[org_id] = Decimal(total).quantize(Decimal(1).scaleb(-cost.decimal_places))
            else:
                reserved[org_id] += jobs * job_cost(owner, kind)
    return {
        org_id: SpendFacts(cap=cap, spent=spent.get(org_id, Decimal(0)), in_flight=reserved[org_id])
        for org_id, cap in caps.items()
    }


# `organization_spend`'s two reads in one statement, its text made once (as ORM queries they
# were built anew every cycle: ~1.5 ms): per organization its spend today (rows with a cost,
# index outreach_spend_by_owner), then per organization, owner and kind its LLM jobs in flight
# (the partial in-flight index). Portable: SQLite (the demo) reads it too.
_SPEND = f"""
    SELECT o.organization_id, NULL, NULL, CAST(SUM(q.llm_cost) AS TEXT), 0
    FROM {Outreach._meta.db_table} q JOIN {Owner._meta.db_table} o ON o.id = q.owner_id
    WHERE o.organization_id IN ({{organizations}}) AND q.generated_at >= %s AND q.llm_cost > 0
    GROUP BY o.organization_id
    UNION ALL
    SELECT o.organization_id, q.owner_id, q.kind, NULL, COUNT(*)
    FROM {Outreach._meta.db_table} q JOIN {Owner._meta.db_table} o ON o.id = q.owner_id
    WHERE o.organization_id IN ({{organizations}}) AND q.state IN ({", ".join(["%s"] * len(LLM_IN_FLIGHT))})
        AND q.draft_body = ''
    GROUP BY o.organization_id, q.owner_id, q.kind
"""


def suppressed_leads(*, outreach_ids: Iterable[int]) -> dict[int, str]:
    """Row id -> its lead's status, for the rows among these whose lead may not be emailed any
    more (opted out, bounced, complained): the rows loaded joined to their leads, never a read
    of every lead: where few are suppressed PostgreSQL starts from those (index
    lead_suppressed), where many, from the rows. Without that index it read the whole leads
    table each cycle to find the few (10 ms a cycle at 100,000 leads, 2026-12-06). One
    statement written once (`_SUPPRESSED`): as an ORM query of a thousand ids it took ~2.3 ms
    a cycle, ~0.6 of it PostgreSQL's (2026-12-07)."""
    ids = list(outreach_ids)
    if not ids:
        return {}
    rows, params = any_of("q.id", ids, vendor=connection.vendor)
    with connection.cursor() as cursor:
        cursor.execute(_SUPPRESSED.format(rows=rows), [*params, *sorted(SUPPRESSED)])
        return dict(cursor.fetchall())


# The statuses as literals the partial index lead_suppressed's predicate matches (bound on
# the client, as Django's psycopg cursors bind).
_SUPPRESSED = (
    f"SELECT q.id, l.status FROM {TABLE} q JOIN {Lead._meta.db_table} l ON l.id = q.lead_id "
    f"WHERE {{rows}} AND l.status IN ({', '.join(['%s'] * len(SUPPRESSED))})"
)


# An LLM job in flight: a row holding an LLM reservation (a send in flight has its draft).
LLM_JOBS = Q(state__in=LLM_IN_FLIGHT, draft_body="")


def llm_in_flight() -> int:
    """Outreach holding an LLM reservation now: bounded by DISPATCH_MAX_IN_FLIGHT (a cycle
    counts them with its committed work instead: `CommittedWork.llm_in_flight`)."""
    return Outreach.objects.filter(LLM_JOBS).count()


def reasons_write(*, reasons: Mapping[tuple[int, int], str], rows_each: int) -> None:
    """Write each (owner, tier) -> reason on that owner's next `rows_each` queued rows of the
    tier (index outreach_ready_by_owner_tier): one statement on PostgreSQL, whatever the number
    of owners; SQLite (the demo) has no LATERAL and writes them one by one."""
    if not reasons:
        return
    if connection.vendor != "postgresql":
        for (owner_id, tier), reason in reasons.items():
            head = Outreach.objects.filter(owner_id=owner_id, tier=tier, state=State.QUEUED)
            ids = list(head.order_by("not_before", "id").values_list("id", flat=True)[:rows_each])
            Outreach.objects.filter(id__in=ids).update(blocked_reason=reason)
        return
    pairs = list(reasons.items())
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {TABLE} o SET blocked_reason = head.reason
            FROM unnest(%s::bigint[], %s::int[], %s::text[]) AS n(owner_id, tier, reason)
            CROSS JOIN LATERAL (
                SELECT q.id, n.reason FROM {TABLE} q
                WHERE q.owner_id = n.owner_id AND q.tier = n.tier AND q.state = 'queued'
                ORDER BY q.not_before, q.id LIMIT %s
            ) AS head
            WHERE o.id = head.id
            """,
            [
                int_array(o for (o, _), _ in pairs),
                int_array(t for (_, t), _ in pairs),
                [r for _, r in pairs],
                rows_each,
            ],
        )


def queued_head(*, rows: int) -> list[int]:
    """The next `rows` queued rows with no draft yet, all owners together (index
    outreach_queued_in_line)."""
    head = Outreach.objects.filter(state=State.QUEUED, draft_body="").order_by("not_before", "id")
    return list(head.values_list("id", flat=True)[:rows])


@dataclass(frozen=True, slots=True)
class ReadyOwners:
    """A tier's owners with ready work as one read found them: `found`, in owner id order, every
    such owner when `complete`; else the first `limit` + 1 only, and which of the owners asked
    about (`probed`) have some, with their first ready rows (`first_rows`: up to FIRST_ROWS ids
    each, in the order `ready_candidates` reads them; PostgreSQL only)."""

    found: list[int]
    complete: bool
    probed: list[int]
    first_rows: dict[int, list[int]] = field(default_factory=dict)


# A probe of an owner for ready work also reads its first rows, up to this many: at 10,000
# owners a window's owners are offered one or two rows each (selection.rows_to_load), and
# reading them with the probe cost 0.5 ms more than the probe alone where reading them again
# for the candidates cost 8 (627 owners, 10^6 queued rows, 2026-12-06).
FIRST_ROWS = 2


def _ready_owners_sql(*, tier: Tier, now: datetime, limit: int, probe: list[int]) -> tuple[str, list[Any]]:
    if connection.vendor == "postgresql":
        # A loose scan of outreach_ready_by_tier_owner: from each owner found, the next owner
        # with a ready row (one probe each), at most `limit` + 1, ordered by the index's owner
        # and due time: an order only that index gives, so the planner never walks the index on
        # the owner alone, filtering each owner's history (it did when the partial index's file
        # was bloated: its pages per entry made it look dearer). Only when it finds more does
        # the second arm probe the owners asked about (the same index; LIMIT 1 in index order,
        # not EXISTS: the planner then never walks an owner's history instead), a row for each
        # of an owner's first rows: not gathered into an array per owner, an aggregate per
        # owner that cost PostgreSQL a quarter of the probe (627 owners, 10^6 rows, 2026-12-06).
        ready = "q.tier = %s AND q.state = 'queued' AND q.not_before <= %s"
        sql = f"""
            WITH RECURSIVE loose(owner_id, n) AS (
                (SELECT q.owner_id, 1 FROM {TABLE} q WHERE {ready} ORDER BY q.owner_id, q.not_before LIMIT 1)
                UNION ALL
                SELECT next.owner_id, loose.n + 1 FROM loose CROSS JOIN LATERAL (
                    SELECT q.owner_id FROM {TABLE} q WHERE {ready} AND q.owner_id > loose.owner_id
                    ORDER BY q.owner_id, q.not_before LIMIT 1
                ) AS next
                WHERE loose.n <= %s
            )
            SELECT owner_id, true, NULL::bigint FROM loose
            UNION ALL
            (SELECT o.owner_id, false, first.id FROM unnest(%s::bigint[]) AS o(owner_id)
            CROSS JOIN LATERAL (
                SELECT q.id, q.not_before FROM {TABLE} q WHERE q.owner_id = o.owner_id AND {ready}
                ORDER BY q.not_before, q.id LIMIT {FIRST_ROWS:d}
            ) AS first
            WHERE (SELECT count(*) FROM loose) > %s
            ORDER BY o.owner_id, first.not_before, first.id)
        """
        params = [int(tier), now, int(tier), now, limit, int_array(probe), int(tier), now, limit]
        return sql, params
    # SQLite (the demo): no LATERAL; the owners found, then those asked about, both by DISTINCT
    marks = ",".join("%s" for _ in probe) or "NULL"
    where = "tier = %s AND state = 'queued' AND not_before <= %s"
    sql = f"""
        SELECT owner_id, 1, NULL FROM (
            SELECT DISTINCT owner_id FROM {TABLE} WHERE {where} ORDER BY owner_id LIMIT %s
        )
        UNION ALL
        SELECT DISTINCT owner_id, 0, NULL FROM {TABLE} WHERE owner_id IN ({marks}) AND {where}
    """
    return sql, [int(tier), now, limit + 1, *probe, int(tier), now]


def ready_owners(*, tier: Tier, now: datetime, limit: int, probe: Iterable[int] = ()) -> ReadyOwners:
    """The tier's owners with ready work: every one when there are at most `limit` (a loose
    index scan, one probe per owner found: it costs what it finds, not the active owners);
    past that, which of the owners in `probe` have some (one probe each: the owners the
    cycle's window reaches first). `limit` 0: only the owners in `probe` (the tier is known to
    have more). Inactive owners' rows are found too: the caller keeps its active owners."""
    probe = list(probe)
    found: list[int] = []
    probed: list[int] = []
    first_rows: dict[int, list[int]] = {}
    with connection.cursor() as cursor:
        cursor.execute(*_ready_owners_sql(tier=tier, now=now, limit=limit, probe=probe))
        for owner_id, loose, row in cursor.fetchall():
            if loose:
                found.append(owner_id)
            elif row is None:  # SQLite's probe: the owner only
                probed.append(owner_id)
            elif owner_id in first_rows:  # PostgreSQL's: its first rows, in (not_before, id) order
                first_rows[owner_id].append(row)
            else:
                probed.append(owner_id)
                first_rows[owner_id] = [row]
    complete = len(found) <= limit
    if complete:
        return ReadyOwners(found=sorted(found), complete=True, probed=[])
    return ReadyOwners(found=sorted(found), complete=False, probed=probed, first_rows=first_rows)


def _top_k_sql(
    *, condition: str, params: list[Any], order: tuple[str, ...], k_by_owner: Mapping[int, int]
) -> tuple[str, list[Any]]:
    owners = list(k_by_owner)
    inner_order = ", ".join(f"q.{col}" for col in order)
    if connection.vendor == "postgresql":
        # One arm per power of two the owners' k round up to, its LIMIT written in the statement
        # (the caller keeps each owner's first k). With `LIMIT o.k` the planner cannot see how
        # few rows each owner gives, and when an owner's rows lie together in the table (a bulk
        # assignment writes them so) it reads and sorts all of them through the index on the
        # owner alone instead of walking the ordered partial index for the first few.
        by_limit: dict[int, list[int]] = defaultdict(list)
        for owner in owners:
            by_limit[1 << (k_by_owner[owner] - 1).bit_length()].append(owner)
        limits = sorted(by_limit)
        columns = ", ".join(f"q.{col}" for col in ("owner_id", *order) if col != "id")
        arms = [
            f"""
            SELECT c.* FROM unnest(%s::bigint[]) AS o(owner_id) CROSS JOIN LATERAL (
                SELECT q.id, {columns} FROM {TABLE} q
                WHERE q.owner_id = o.owner_id AND {condition} ORDER BY {inner_order} LIMIT {limit:d}
            ) c"""
            for limit in limits
        ]
        outer_order = ", ".join(f"a.{col}" for col in order)
        sql = (
            f"SELECT a.id, a.owner_id FROM ({' UNION ALL '.join(arms)}) a ORDER BY a.owner_id, {outer_order}"
        )
        return sql, [p for limit in limits for p in (int_array(by_limit[limit]), *params)]
    marks = ",".join("%s" for _ in owners)
    sql = f"""
        SELECT id, owner_id FROM (
            SELECT q.id, q.owner_id, ROW_NUMBER() OVER (PARTITION BY q.owner_id ORDER BY {inner_order}) AS rn
            FROM {TABLE} q WHERE q.owner_id IN ({marks}) AND {condition}
        ) WHERE rn <= %s ORDER BY owner_id, rn
    """
    return sql, [*owners, *params, max(k_by_owner.values())]


def _top_k(
    *, condition: str, params: list[Any], order: tuple[str, ...], k_by_owner: Mapping[int, int]
) -> dict[int, list[int]]:
    """Per owner, the first k ids matching `condition` in `order` (a partial index serves each)."""
    k_by_owner = {o: k for o, k in k_by_owner.items() if k > 0}
    if not k_by_owner:
        return {}
    result: dict[int, list[int]] = defaultdict(list)
    with connection.cursor() as cursor:
        cursor.execute(*_top_k_sql(condition=condition, params=params, order=order, k_by_owner=k_by_owner))
        for outreach_id, owner_id in cursor.fetchall():
            if len(result[owner_id]) < k_by_owner[owner_id]:
                result[owner_id].append(outreach_id)
    return dict(result)


READY = "q.tier = %s AND q.state = 'queued' AND q.not_before <= %s"
APPROVED = "q.state = 'approved' AND q.not_before <= %s"  # not_before: a send retry's backoff


def ready_candidates(
    *,
    tier: Tier,
    k_by_owner: Mapping[int, int],
    now: datetime,
    first_rows: Mapping[int, Sequence[int]] | None = None,
) -> dict[int, list[Candidate]]:
    """Each owner's k oldest ready rows in the tier (index outreach_ready_by_owner_tier). An
    owner whose `first_rows` (a probe's, `ReadyOwners.first_rows`) hold k of them, or all it
    has, takes those; only the others' are read."""
    first = first_rows or {}
    ids = {
        o: list(rows[:k])
        for o, k in k_by_owner.items()
        if k > 0 and (rows := first.get(o)) is not None and (k <= len(rows) or len(rows) < FIRST_ROWS)
    }
    ids |= _top_k(
        condition=READY,
        params=[int(tier), now],
        order=("not_before", "id"),
        k_by_owner={o: k for o, k in k_by_owner.items() if o not in ids},
    )
    return {
        owner: [Candidate(outreach_id=i, owner_id=owner, tier=tier) for i in found]
        for owner, found in ids.items()
    }


def approved_candidates(
    *, k_by_owner: Mapping[int, int], now: datetime, paused_tiers: Mapping[int, frozenset[Tier]] | None = None
) -> dict[int, list[int]]:
    """Each owner's k oldest approved drafts (index outreach_approved_by_owner), leaving out the
    tiers paused for that owner: one query per distinct set of paused tiers (usually one)."""
    paused_tiers = paused_tiers or {}
    groups: dict[frozenset[Tier], dict[int, int]] = defaultdict(dict)
    for owner_id, k in k_by_owner.items():
        groups[paused_tiers.get(owner_id, frozenset())][owner_id] = k
    found: dict[int, list[int]] = {}
    for tiers, group in groups.items():
        condition = APPROVED
        if tiers:  # integers of the Tier enum only: nothing from the outside reaches the SQL
            condition += f" AND q.tier NOT IN ({', '.join(str(int(t)) for t in sorted(tiers))})"
        found |= _top_k(condition=condition, params=[now], order=("state_changed_at", "id"), k_by_owner=group)
    return found


def explain_selection_queries(*, owner_ids: list[int], now: datetime, k: int = 8) -> dict[str, str]:
    """EXPLAIN of each selection query (PostgreSQL), for the index check in tests and docs."""
    k_by_owner = dict.fromkeys(owner_ids, k)
    queries = {
        "ready_owners": _ready_owners_sql(tier=Tier.INTRO, now=now, limit=len(owner_ids), probe=owner_ids),
        "ready_candidates": _top_k_sql(
            condition=READY, params=[int(Tier.INTRO), now], order=("not_before", "id"), k_by_owner=k_by_owner
        ),
        "approved_candidates": _top_k_sql(
            condition=APPROVED, params=[now], order=("state_changed_at", "id"), k_by_owner=k_by_owner
        ),
    }
    plans = {}
    with connection.cursor() as cursor:
        for name, (sql, params) in queries.items():
            cursor.execute("EXPLAIN " + sql, params)
            plans[name] = "\n".join(row[0] for row in cursor.fetchall())
    return plans
