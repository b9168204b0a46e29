"""Pauses: stopping part of the work by name, and resuming it (the Pause record: orchestrator/models.py).

Who reads them:
- the dispatch cycle (`blocking`): a paused owner gets no room this cycle, a paused tier of an
  owner gets no candidates, and the next rows in line say why they wait (blocked_reason);
- a worker picking up a job (`job_pause`): work dispatched before the pause went on is put back
  (generation: DISPATCHED -> QUEUED, reservation refunded, no attempt charged; send:
  DISPATCHED -> APPROVED, no LLM call again), so a pause never leaves rows DISPATCHED.
Work already mid-call finishes: taking a live LLM call away would waste what it cost.

Who writes them: an operator (admin, `pause` / `resume` commands) and automatic rules (bounce
and complaint rates). `pause` is idempotent: the same scope paused twice is one pause.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import connection
from django.utils import timezone

from orchestrator.models import Pause
from outreach.models import Mailbox, Organization, Outreach, Owner, Prepared
from outreach.tiers import Tier


@dataclass(frozen=True)
class Blocking:
    """What the active pauses stop among a set of owners: the dispatch cycle's view."""

    owners: dict[int, str] = field(default_factory=dict)  # owner id -> reason (all its work)
    tiers: dict[int, dict[Tier, str]] = field(default_factory=dict)  # owner id -> tier -> reason
    # The pauses that stop all the work of every owner in their scope, those not asked about
    # too, oldest first, each with its reason: ("organization", id) for an organization paused
    # as a whole (every tier, any domain), ("domain", (domain, organization id or None: every
    # organization)) for a sender domain paused (every tier; owners sending from mailboxes of
    # their own are judged per mailbox instead, orchestrator.controls.mailboxes)
    whole: dict[tuple[str, object], str] = field(default_factory=dict)

    def tiers_of(self, owner_id: int) -> frozenset[Tier]:
        return frozenset(self.tiers.get(owner_id, {}))


def pause(
    *,
    organization: Organization | None = None,
    owner: Owner | None = None,
    tier: Tier | None = None,
    sender_domain: str = "",
    by: AbstractBaseUser | None = None,
    reason: str = "",
    source: str = Pause.Source.OPERATOR,
    now: datetime | None = None,
) -> tuple[Pause, bool]:
    """Pause a scope; return (the active pause, created). An owner's pause names its organization
    too, so tenancy checks see whose it is."""
    if owner is not None:
        organization = owner.organization
    scope = {
        "organization": organization,
        "owner": owner,
        "tier": None if tier is None else int(tier),
        "sender_domain": sender_domain.strip().lower(),
    }
    existing = Pause.objects.filter(resumed_at__isnull=True, **scope).first()
    if existing is not None:
        return existing, False
    created = Pause.objects.create(
        **scope,
        source=source,
        reason=reason,
        created_by_id=None if by is None else by.pk,
        created_at=now or timezone.now(),
    )
    return created, True


def resume(*, pauses: Iterable[Pause], by: AbstractBaseUser | None, now: datetime | None = None) -> int:
    """Lift these pauses (those still active); return how many. Waiting work goes at the next cycle."""
    ids = [p.pk for p in pauses]
    return Pause.objects.filter(pk__in=ids, resumed_at__isnull=True).update(
        resumed_at=now or timezone.now(), resumed_by_id=None if by is None else by.pk
    )


def active_of(*, organization: Organization | None = None, owner: Owner | None = None) -> list[Pause]:
    """The active pauses set on exactly this owner, or on this organization as a whole (not on
    one of its owners): what "Resume" on that row lifts, whatever tier or domain they name."""
    rows = Pause.objects.filter(resumed_at__isnull=True)
    if owner is not None:
        return list(rows.filter(owner=owner))
    return list(rows.filter(organization=organization, owner__isnull=True))


def active() -> list[Pause]:
    """The active pauses, oldest first (a handful: one indexed read, its SQL compiled once per
    process: the ORM built the three joins again for every dispatch cycle)."""
    return _ACTIVE.all()


_ACTIVE = Prepared(
    lambda: (
        Pause.objects.filter(resumed_at__isnull=True)
        .select_related("organization", "owner", "created_by")
        .order_by("created_at", "id")
    )
)


@dataclass(frozen=True)
class ActivePauses:
    """The active pauses as `blocking` judges owners by them (`active_pauses`): oldest first,
    each one's reason, each under the narrowest part of its scope (`_narrowest`), and the
    scopes they stop whole (`Blocking.whole`). The dispatcher keeps them while their scopes
    and the names in their reasons stand (orchestrator.dispatch.reads.active_pauses_load)."""

    pauses: list[Pause] = field(default_factory=list)
    reasons: dict[int, str] = field(default_factory=dict)  # pause id -> what waiting work says
    under: dict[tuple[str, object], list[tuple[int, Pause]]] = field(default_factory=dict)
    whole: dict[tuple[str, object], str] = field(default_factory=dict)


def active_pauses() -> ActivePauses:
    """The active pauses (`active`), indexed for `blocking`: O(pauses)."""
    pauses = active()
    reasons = {p.pk: p.blocked_reason() for p in pauses}
    # Each pause under the narrowest part of its scope, so an owner meets only the pauses that
    # may cover it (most owners none), not every pause: thousands of owners x every pause was
    # a tenth of a 10,000-owner cycle (bench/dispatch.py --controls).
    under: dict[tuple[str, object], list[tuple[int, Pause]]] = {}
    for n, p in enumerate(pauses):
        under.setdefault(_narrowest(p), []).append((n, p))
    whole: dict[tuple[str, object], str] = {}
    for p in pauses:  # oldest first: the first of a scope names its reason
        if p.owner_id is not None or p.tier is not None:
            continue
        if p.sender_domain:
            whole.setdefault(("domain", (p.sender_domain, p.organization_id)), reasons[p.pk])
        elif p.organization_id is not None:
            whole.setdefault(("organization", p.organization_id), reasons[p.pk])
    return ActivePauses(pauses=pauses, reasons=reasons, under=under, whole=whole)


def blocking(
    *,
    owner_ids: Iterable[int],
    mailbox_owners: Collection[int] = (),
    organizations: Mapping[int, tuple[int, str]] | None = None,
    scopes: list[PauseScope] | None = None,
    kept: ActivePauses | None = None,
) -> Blocking:
    """What the active pauses stop among these owners. One query, plus two for the owners'
    organizations and their sender domains when anything is paused and the caller did not
    pass them (`organizations`: owner id -> its organization's id and sender domain, as the
    dispatch cycle has them): O(pauses + owners); O(owners) with the pauses `kept` (their
    `active_pauses` as the caller keeps them). `mailbox_owners` send from mailboxes of
    their own: a sender-domain pause is judged per mailbox for them
    (orchestrator.controls.mailboxes), not by their organization's sender domain. `scopes`:
    the active pauses' scopes when the caller read them (`active_pause_scopes`): with none,
    nothing more is read."""
    if kept is None:
        kept = active_pauses() if scopes is None or scopes else ActivePauses()
    if not kept.pauses:
        return Blocking()
    if organizations is not None:
        owner_org = {owner_id: organizations[owner_id][0] for owner_id in owner_ids}
        domain_of = {organizations[owner_id][0]: organizations[owner_id][1] for owner_id in owner_org}
    else:
        owner_org = dict(Owner.objects.filter(id__any=owner_ids).values_list("id", "organization_id"))
        # Per organization once, not per owner (thousands of owners, a few of each).
        domain_of = {
            org.pk: org.sender_domain
            for org in Organization.objects.filter(id__any=set(owner_org.values())).only("id", "sender_email")
        }
    under, reasons = kept.under, kept.reasons
    result = Blocking(whole=dict(kept.whole))
    # An owner without a pause of its own is judged by its organization's pauses, its domain's
    # and the global ones alone: one verdict per (organization, sends from mailboxes), shared.
    shared: dict[tuple[int, bool], tuple[str, dict[Tier, str]]] = {}
    for owner_id, organization_id in owner_org.items():
        own = under.get(("owner", owner_id), ())
        key = (organization_id, owner_id in mailbox_owners)
        verdict = shared.get(key) if not own else None
        if verdict is None:
            found = [
                *own,
                *under.get(("organization", organization_id), ()),
                *under.get(("domain", domain_of[organization_id]), ()),
                *under.get(("all", None), ()),
            ]
            found.sort(key=lambda np: np[0])  # oldest first: the first that applies names the reason
            verdict = _verdict(
                [p for _, p in found],
                owner_id=owner_id,
                organization_id=organization_id,
                sender_domain=domain_of[organization_id],
                from_mailboxes=key[1],
                reasons=reasons,
            )
            if not own:
                shared[key] = verdict
        stopped, tiers = verdict
        if stopped:
            result.owners[owner_id] = stopped
        if tiers:
            result.tiers[owner_id] = dict(tiers)
    return result


def _verdict(
    pauses: Iterable[Pause],
    *,
    owner_id: int,
    organization_id: int,
    sender_domain: str,
    from_mailboxes: bool,
    reasons: dict[int, str],
) -> tuple[str, dict[Tier, str]]:
    """What these pauses (oldest first) stop of one owner's work: the reason all of it stops
    ("" = it does not), and the reason per paused tier."""
    stopped, tiers = "", dict[Tier, str]()
    for p in pauses:
        if p.sender_domain and from_mailboxes:
            continue
        scope = (p.organization_id, p.owner_id, None, p.sender_domain)  # some tier of the owner's work
        if not _covers(
            scope, owner_id=owner_id, organization_id=organization_id, sender_domain=sender_domain, tier=None
        ):
            continue
        if p.tier is None:
            stopped = stopped or reasons[p.pk]
        else:
            tiers.setdefault(Tier(p.tier), reasons[p.pk])
    return stopped, tiers


def _narrowest(p: Pause) -> tuple[str, object]:
    """The part of a pause's scope only some owners match: its owner, else its organization,
    else its sender domain; ("all", None) for a pause of everything (a tier everywhere)."""
    if p.owner_id is not None:
        return ("owner", p.owner_id)
    if p.organization_id is not None:
        return ("organization", p.organization_id)
    if p.sender_domain:
        return ("domain", p.sender_domain)
    return ("all", None)


# An active pause's scope: id, organization id, owner id, tier, sender domain (None or "": any)
PauseScope = tuple[int, int | None, int | None, int | None, str]


def active_pause_scopes() -> list[PauseScope]:
    """The active pauses' scopes, oldest first. Every job asks, and there is almost never a
    pause: one plain indexed read (no ORM query to build: that cost a worker more CPU than the
    read)."""
    with connection.cursor() as cursor:
        cursor.execute(_ACTIVE_SCOPES)
        return cursor.fetchall()


def job_pause(*, outreach: Outreach, scopes: list[PauseScope] | None = None) -> Pause | None:
    """The active pause that stops this outreach, if any, matched against `scopes`
    (active_pause_scopes(), read here when not given); the pause itself is loaded only when one
    applies. The outreach's owner and organization must be loaded (select_related)."""
    organization = outreach.lead.organization
    for pause_id, *scope in active_pause_scopes() if scopes is None else scopes:  # oldest first
        if _covers(
            tuple(scope),
            owner_id=outreach.owner_id,
            organization_id=organization.pk,
            sender_domain=organization.sender_domain,
            tier=int(outreach.tier),
        ) and not (scope[3] and _sends_from_mailboxes(owner_id=outreach.owner_id)):
            return Pause.objects.select_related("organization", "owner", "created_by").get(pk=pause_id)
    return None


def paused_sender_domains(scopes: list[PauseScope] | None = None) -> set[tuple[str, int | None]]:
    """(sender domain, organization id or None: every organization) of the active pauses of a
    whole sender domain, from `scopes` (active_pause_scopes(), read here when not given)."""
    return {
        (domain.lower(), organization_id)
        for _, organization_id, owner_id, tier, domain in (
            active_pause_scopes() if scopes is None else scopes
        )
        if domain and owner_id is None and tier is None
    }


def _sends_from_mailboxes(*, owner_id: int) -> bool:
    """An owner with mailboxes of its own: a sender-domain pause is judged per mailbox for it
    (orchestrator.controls.mailboxes). Asked only when such a pause matches (rare)."""
    return Mailbox.owners.through.objects.filter(owner_id=owner_id).exists()


_ACTIVE_SCOPES = (
    f"SELECT id, organization_id, owner_id, tier, sender_domain FROM {Pause._meta.db_table}"
    " WHERE resumed_at IS NULL ORDER BY created_at, id"
)


def _covers(
    scope: tuple[Any, ...], *, owner_id: int, organization_id: int, sender_domain: str, tier: int | None
) -> bool:
    """The one pause matcher: does a pause of this scope (organization id, owner id, tier,
    sender domain; None or "" = any) stop the work in `tier` (None: in some tier) of this owner,
    of that organization sending from `sender_domain`?"""
    paused_organization_id, paused_owner_id, paused_tier, paused_domain = scope
    return (
        (paused_organization_id is None or paused_organization_id == organization_id)
        and (paused_owner_id is None or paused_owner_id == owner_id)
        and (tier is None or paused_tier is None or paused_tier == tier)
        and (not paused_domain or paused_domain == sender_domain)
    )
