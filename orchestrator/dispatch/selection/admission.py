"""Admission: which owners' work, and which rows, may take LLM work now. The one place every
limit the send path would enforce later is checked before a token is spent, so a refused row
stays QUEUED saying why (Outreach.blocked_reason) instead of being written and bouncing back.

The rules, in order (docs/dispatch.md lists them with the reason a refused row shows); the
first that refuses names the reason:
  1. pauses at every scope (owner, organization, tier, sender domain, organization on a domain)
  2. the owner's hours and working days
  3. the owner's day: daily limit - sent today - in flight (approved drafts leave under this)
  4. the owner's mailboxes' day and warm-up step (`OwnerFacts.mailbox_room`: what they may still
     send today, less what the owner has in flight and drafted; None for an owner without a
     mailbox of its own, which sends from its organization's sender: rule 6 bounds it)
  5. the owner's committed drafts: what it has committed (sent today + in flight + awaiting
     approval + approved and unsent) stays within its day, plus `draft_ahead_days` days for an
     owner whose drafts wait for review
  6. the sender domain's day and warm-up step (sent today on it, and what its owners committed):
     the domains of the owner's mailboxes, else its organization's sender domain
  7. the organization's daily spend cap, counting work in flight at its reserved cost
  8. the lead still sendable (a row whose lead opted out, bounced or complained meanwhile)
Rules 1-7 are per owner (`owner_admission`): a refused owner gets no LLM room, so the batch
gives its slots to the others in the same cycle. Rules 6 and 7 are also shared by several
owners: `picks_admission` holds the batch's picks to what is left of them. Rule 8 is per row
(`unsendable_rows`), applied to the loaded candidates before the batch.

Pure: facts in, decisions out; the shell (cycle/admission.py) loads the facts in bounded
queries. A new limit is one more fact and one more rule here.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import NamedTuple

from orchestrator.budget.mailboxes import MAILBOXES_PAUSED
from orchestrator.budget.sends import DomainDay, day_cap_reason
from orchestrator.controls.spend import spend_cap_reason
from orchestrator.dispatch.owner_limits import OwnerRules, owner_capacity

SENDABLE_REFUSED = "lead {status}: nothing is sent to it"


class OwnerFacts(NamedTuple):
    """What the admission knows of one active owner this cycle (a tuple, as `OwnerAdmission`:
    one an owner judged)."""

    rules: OwnerRules
    organization_id: int
    sender_domain: str  # its organization's sender: where its mail leaves from without a mailbox
    sent_today: int = 0
    in_flight: int = 0  # DISPATCHED, GENERATING, SENDING
    drafts: int = 0  # AWAITING_APPROVAL and APPROVED: written, not sent
    review_required: bool = False
    draft_ahead_days: int = 0
    paused: str = ""  # the reason of the pause that stops all its work ("" = none)
    # Rule 4: per sender domain of its usable mailboxes (active, domain not paused), the emails
    # they may still send today (cap and warm-up step, less what they sent); None: no mailbox
    # of its own, no mailbox limit applies; {}: every mailbox paused.
    mailbox_room: Mapping[str, int] | None = None

    @property
    def committed(self) -> int:
        return self.sent_today + self.in_flight + self.drafts

    @property
    def sender_domains(self) -> tuple[str, ...]:
        """The domains its mail leaves from (rule 6): its usable mailboxes', else its organization's."""
        return (self.sender_domain,) if self.mailbox_room is None else tuple(sorted(self.mailbox_room))


@dataclass(frozen=True, slots=True)
class SpendFacts:
    """An organization's daily spend cap, what it spent today and what its jobs in flight
    reserve (dollars: each job's learned counted tokens at the dearest configured price)."""

    cap: Decimal
    spent: Decimal
    in_flight: Decimal

    def left(self) -> Decimal:
        """What new jobs may still reserve: they start while this is above 0."""
        return self.cap - self.spent - self.in_flight

    def reason(self) -> str:
        return spend_cap_reason(self.cap)


class OwnerAdmission(NamedTuple):
    """`send`: approved drafts it may hand to `send` now (rules 1-3). `llm`: new LLM jobs it
    may start (rules 1-7); `reason` says why `llm` is 0. A tuple, as `Capacity`: one an owner
    judged."""

    send: int
    llm: int
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Shared:
    """The rooms several owners share (rules 6, 7) and the rows refused one by one (rule 8)."""

    # owner id -> the sender domains its mail leaves from (empty when no domain has a cap)
    domain_of: Mapping[int, tuple[str, ...]]
    domain_room: Mapping[str, int]  # only domains with a cap
    domain_reason: Mapping[str, str]
    org_of: Mapping[int, int]  # owner id -> organization id
    spend_left: Mapping[int, Decimal]  # only organizations with a cap: dollars new jobs may reserve
    spend_reason: Mapping[int, str]
    job_cost: Mapping[int, Decimal]  # owner id -> its next job's reserved cost (dollars; 0 unpriced)


def owner_admission(
    *,
    owners: Sequence[OwnerFacts],
    now: datetime,
    domains: Mapping[str, DomainDay],
    spend: Mapping[int, SpendFacts],
    job_cost: Mapping[int, Decimal] | None = None,
    elsewhere: Mapping[str, int] | None = None,
) -> tuple[dict[int, OwnerAdmission], Shared]:
    """Rules 1-7 for each owner, and the shared rooms `picks_admission` holds the picks to.
    `job_cost`: what each owner's next job reserves against a spend cap (absent: unpriced).
    `elsewhere`: per sender domain, the work in flight and drafts of owners not judged now
    that will leave from it all the same: rule 6 counts it on the domain's day."""
    shared = _shared(
        owners=owners, elsewhere=elsewhere or {}, domains=domains, spend=spend, job_cost=job_cost or {}
    )
    return {o.rules.owner_id: _one_owner(o, now=now, shared=shared) for o in owners}, shared


def _one_owner(o: OwnerFacts, *, now: datetime, shared: Shared) -> OwnerAdmission:
    """The rules in order: the first whose room is spent names the reason (written only then:
    a cycle judges thousands of owners and most pass); else the LLM room is the least of them."""
    if o.paused:  # rule 1
        return OwnerAdmission(0, 0, o.paused)
    day = owner_capacity(rules=o.rules, now=now, used_today=o.sent_today + o.in_flight)  # rules 2, 3
    days = 1 + (o.draft_ahead_days if o.review_required else 0)
    # Drafting ahead writes tomorrow's once today's are out, inside its hours, with a limit.
    if day.remaining <= 0 and (days == 1 or not day.open or o.rules.daily_limit <= 0):
        return OwnerAdmission(0, 0, day.blocked_reason)
    send = max(0, day.remaining)
    # Rule 5's room (within one day it also keeps rule 3: committed includes sent and in
    # flight), judged after rule 4's.
    llm = o.rules.daily_limit * days - o.committed
    if o.mailbox_room is not None:  # rule 4: what is in flight or drafted leaves from them too
        pending, left = o.in_flight + o.drafts, sum(o.mailbox_room.values())
        if left - pending <= 0:
            return OwnerAdmission(
                send, 0, _mailbox_reason(left, pending) if o.mailbox_room else MAILBOXES_PAUSED
            )
        llm = min(llm, left - pending)
    if llm <= 0:
        return OwnerAdmission(send, 0, _committed_reason(o, days))
    # rule 6 (none of the domains has a cap: most cycles)
    capped = _all_capped(shared.domain_of[o.rules.owner_id], shared.domain_room) if shared.domain_room else []
    if capped:
        room = sum(max(0, shared.domain_room[d]) for d in capped)
        if room <= 0:
            return OwnerAdmission(send, 0, shared.domain_reason[capped[0]])
        llm = min(llm, room)
    if o.organization_id in shared.spend_left:  # rule 7
        jobs = _spend_room(shared.spend_left[o.organization_id], shared.job_cost.get(o.rules.owner_id))
        if jobs is not None:
            if jobs <= 0:
                return OwnerAdmission(send, 0, shared.spend_reason[o.organization_id])
            llm = min(llm, jobs)
    return OwnerAdmission(send, llm)


def _all_capped(domains: Sequence[str], room: Mapping[str, int]) -> list[str]:
    """The domains, when each of them has a day cap (`room`); [] when one has none (mail can
    leave from that one whatever the others' days)."""
    return list(domains) if domains and all(d in room for d in domains) else []


@lru_cache(maxsize=256)
def _spend_room(left: Decimal, job_cost: Decimal | None) -> int | None:
    """Jobs at `job_cost` that fit in what is left (the last may pass by less than one); None:
    unpriced, no limit. Worked out once per (left, cost): an organization's owners share a
    few learned costs, and a division of Decimals per owner judged was about a sixth of
    `owner_admission` over bench/dispatch.py's 512 judged owners (2026-12-07, evening)."""
    if left <= 0:
        return 0
    return math.ceil(left / job_cost) if job_cost else None


def _mailbox_reason(room: int, pending: int) -> str:
    return (
        f"mailboxes' day reached: {room} more may leave today (cap and warm-up step), "
        f"{pending} in flight or drafted; more tomorrow or with another mailbox"
    )


def _committed_reason(o: OwnerFacts, days: int) -> str:
    limit = o.rules.daily_limit * days
    ahead = f" ({days} days of {o.rules.daily_limit})" if days > 1 else ""
    return (
        f"daily limit {limit}{ahead} committed: {o.sent_today} sent today, {o.in_flight} in flight, "
        f"{o.drafts} drafts; more as drafts are sent or rejected"
    )


def _shared(
    *,
    owners: Sequence[OwnerFacts],
    elsewhere: Mapping[str, int],
    domains: Mapping[str, DomainDay],
    spend: Mapping[int, SpendFacts],
    job_cost: Mapping[int, Decimal],
) -> Shared:
    # A domain's day counts what left today (Redis) and what its owners committed and did not
    # send yet: in flight and drafts, all of which will leave from it, judged now or not. Only
    # a domain with a cap has a day (rule 6): with none, no owner's domains are looked at.
    capped = {d: f for d, f in domains.items() if f.cap is not None}
    domain_of = {o.rules.owner_id: o.sender_domains for o in owners} if capped else {}
    pending: Counter[str] = Counter(elsewhere)
    for o in owners if capped else ():  # an owner on several domains: counted on each (it may leave from any)
        if committed := o.in_flight + o.drafts:
            for domain in domain_of[o.rules.owner_id]:
                pending[domain] += committed
    domain_room = {d: (f.cap or 0) - f.sent - pending[d] for d, f in capped.items()}
    return Shared(
        domain_of=domain_of,
        domain_room=domain_room,
        domain_reason={
            d: day_cap_reason(domain=d, cap=f.cap or 0, warmup_day=f.warmup_day) for d, f in capped.items()
        },
        org_of={o.rules.owner_id: o.organization_id for o in owners},
        spend_left={org_id: facts.left() for org_id, facts in spend.items()},
        spend_reason={org_id: facts.reason() for org_id, facts in spend.items()},
        job_cost=job_cost,
    )


@dataclass(frozen=True, slots=True)
class RowVerdicts:
    """Picks admitted (in pick order) and, for each refused row, why."""

    admitted: tuple[int, ...]
    refused: Mapping[int, str]


def unsendable_rows(*, lead_status: Mapping[int, str]) -> dict[int, str]:
    """Rule 8: rows whose lead may not be emailed any more (`lead_status`: row id -> the status
    of its suppressed lead), with the reason they are cancelled."""
    return {row: SENDABLE_REFUSED.format(status=status) for row, status in lead_status.items()}


def picks_admission(
    *, picks: Sequence[tuple[int, int]], shared: Shared, row_cost: Mapping[int, Decimal] | None = None
) -> RowVerdicts:
    """Rules 6 and 7 over the picks (row id, owner id) in order: each takes one of its sender
    domain's room and reserves its cost (`row_cost`, else its owner's job cost) of its
    organization's spend; one past either is refused with its reason."""
    domain_left = dict(shared.domain_room)
    spend_left = dict(shared.spend_left)
    costs = row_cost or {}
    admitted: list[int] = []
    refused: dict[int, str] = {}
    for row, owner in picks:
        org = shared.org_of.get(owner)
        capped = _all_capped(shared.domain_of.get(owner, ()), domain_left)
        domain = max(capped, key=lambda d: domain_left[d]) if capped else None  # the roomiest
        if domain is not None and domain_left[domain] <= 0:
            refused[row] = shared.domain_reason[capped[0]]
            continue
        if org is not None and org in spend_left and spend_left[org] <= 0:
            refused[row] = shared.spend_reason[org]
            continue
        if domain is not None:
            domain_left[domain] -= 1
        if org is not None and org in spend_left:
            spend_left[org] -= costs.get(row, shared.job_cost.get(owner, Decimal(0)))
        admitted.append(row)
    return RowVerdicts(admitted=tuple(admitted), refused=refused)
