"""The admission's shell: load the facts its rules judge (bounded queries, one Redis read) and
apply its verdicts; the rules themselves are the pure selection.admission.

  owners_admit: per owner, what it may send (approved drafts) and what LLM work it may start,
                or why none (rules 1-7)
  rows_admit:   the loaded candidates without rows whose lead is suppressed (rule 8: those are
                cancelled, saying why), and the picks held to the shared rooms (rules 6, 7)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import cast

from django.conf import settings
from django.db import transaction

from config.deployments import deployments
from orchestrator.budget import Budget
from orchestrator.budget.mailboxes import MAILBOXES_PAUSED
from orchestrator.controls import pauses
from orchestrator.controls.mailboxes import mailbox_domains, mailbox_room_today
from orchestrator.controls.spend import job_cost_estimate
from orchestrator.dispatch import reads
from orchestrator.dispatch.owner_tokens import JobCosts
from orchestrator.dispatch.selection import Candidates, Selection
from orchestrator.dispatch.selection.admission import (
    OwnerFacts,
    Shared,
    owner_admission,
    picks_admission,
    unsendable_rows,
)
from outreach.models import Mailbox, Outreach, State
from outreach.tiers import Tier
from outreach.transitions import transition_many

# Re-selections a cycle makes when shared rooms refuse picks: each drops the refused owners'
# rows, so the slots go to others; a few suffice (each round removes at least one owner).
RESELECT_ROUNDS = 3


@dataclass(frozen=True)
class Closed:
    """Who admission refuses whoever judges them, and why: the owners the `paused` scopes stop
    whole (rule 1: `Blocking.whole`, oldest first: an organization paused as a whole, or a
    sender domain paused, for every organization or one, for the owners sending from it without
    a mailbox of their own), the owners none of whose mailboxes may send (rule 4: each one
    deactivated, as the deliverability guard does, or on a paused domain), the owners of the
    organizations `spent` (nothing of their daily spend cap left: rule 7), and the owners whose
    mail leaves only from `domains`, whose day is reached (rule 6): from their organization's
    sender domain (no mailbox of their own), or from usable mailboxes all on such domains. The
    spend and the domains' days are known for those of the owners judged."""

    paused: Mapping[tuple[str, object], str] = field(default_factory=dict)
    spent: Mapping[int, str] = field(default_factory=dict)
    domains: Mapping[str, str] = field(default_factory=dict)
    # The active pauses' scopes the admission read: which mailboxes may send (rule 4). Not
    # part of `entries`: of them only the sender domains' pauses decide that, and `paused`
    # holds those.
    scopes: Sequence[pauses.PauseScope] = ()

    def entries(self) -> dict[tuple[str, object], str]:
        """Each closing, ("paused", its scope), ("spent", organization id) or ("domain", domain),
        and its reason."""
        return {
            **{("paused", scope): r for scope, r in self.paused.items()},
            **{("spent", org): r for org, r in self.spent.items()},
            **{("domain", d): r for d, r in self.domains.items()},
        }

    def reasons(self, every: reads.ActiveOwners) -> Mapping[int, str]:
        """Each closed owner among `every`, with the reason of the first rule that refuses it:
        made once per closing and set of active owners (the last answer kept: a closing
        stands for hours), for the window that counts them and the notes that name them."""
        entries = self.entries()
        if _reasons_last and _reasons_last[0][0] is every and _reasons_last[0][1] == entries:
            return _reasons_last[0][2]
        found = self._reasons(every)
        _reasons_last[:] = [(every, entries, found)]
        return found

    def _reasons(self, every: reads.ActiveOwners) -> dict[int, str]:
        found = {o: reason for org, reason in self.spent.items() for o in every.organization_members(org)}
        found |= {o: reason for domain, reason in self.domains.items() for o in every.domain_members(domain)}
        # Its usable mailboxes' domains (each shared mailbox judged once): none is rule 4's
        # refusal, which comes before rules 6 and 7; all at their day, rule 6's (the first names it).
        usable = mailbox_domains(
            owner_ids=every.mailboxes.keys(), mailboxes=every.mailboxes, scopes=[*self.scopes]
        )
        for owner_id, domains in usable.items():
            if not domains:
                found[owner_id] = MAILBOXES_PAUSED
            elif self.domains and all(d in self.domains for d in domains):
                found[owner_id] = self.domains[domains[0]]
        for (kind, scope), reason in reversed(list(self.paused.items())):  # the oldest last: it names it
            found |= dict.fromkeys(_paused_members(kind, scope, every), reason)
        return found


def _paused_members(kind: str, scope: object, every: reads.ActiveOwners) -> Sequence[int]:
    """The owners among `every` a pause stops whole (`Blocking.whole`'s scopes)."""
    if kind == "organization":
        return every.organization_members(cast("int", scope))
    domain, organization_id = cast("tuple[str, int | None]", scope)
    members = every.domain_members(domain)
    if organization_id is None:
        return members
    return [o for o in members if every.owners[o].organization_id == organization_id]


_reasons_last: list[tuple[reads.ActiveOwners, dict[tuple[str, object], str], Mapping[int, str]]] = []


@dataclass(frozen=True)
class Admitted:
    """The cycle's admission of its owners."""

    send_room: dict[int, int]  # owner -> approved drafts it may hand to `send` now
    llm_room: dict[int, int]  # owner -> LLM jobs it may start now (only owners with some)
    deferred: dict[int, str]  # owner -> why it starts no LLM work
    paused_tiers: dict[int, dict[Tier, str]]
    shared: Shared
    closed: Closed = field(default_factory=Closed)  # owners refused now, judged or not


def job_pricing(costs: JobCosts) -> Callable[[int, str | None], Decimal]:
    """(owner id, kind or None for any) -> what such a job reserves against a spend cap: its learned counted
    tokens (owner_tokens; the configured estimate until learned) at the dearest configured
    price of the models its steps may use (0 when none is priced)."""
    prices, models = settings.LLM_PRICES, [d.model for d in deployments()]

    @cache
    def of_tokens(tokens: int) -> Decimal:  # thousands of owners share a few learned costs
        return job_cost_estimate(prices=prices, models=models, tokens=tokens)

    @cache
    def cost(owner_id: int, kind: str | None) -> Decimal:
        return of_tokens(costs.of(owner_id, kind).counted)

    return cost


def owners_admit(
    *,
    owners: Sequence[reads.ActiveOwner],
    now: datetime,
    budget: Budget,
    price: Callable[[int, str | None], Decimal],
    work: reads.CommittedWork,
    mailboxes: Mapping[int, Sequence[Mailbox]],
    spend_caps: Mapping[int, Decimal],
    elsewhere: Sequence[reads.ActiveOwner] = (),
) -> Admitted:
    """Rules 1-7 for every active owner: O(owners) rows read, one Redis read for the domains.
    `price`: what an owner's job reserves against a spend cap (`job_pricing`); `work`: the
    owners' work in flight and drafts (reads.committed_work_load), read once by the cycle;
    `mailboxes`: the owners' mailboxes as the cycle keeps them (reads.ActiveOwners.mailboxes),
    `spend_caps` their organizations' daily spend caps (ActiveOwners.spend_caps); `elsewhere`: the active owners with work in flight or drafts that the cycle does not judge,
    whose work the sender domains' days count all the same (rule 6)."""
    committed = reads.committed_today(owners=[o.rules for o in owners], now=now, work=work)
    ids = [o.rules.owner_id for o in owners]
    # The active pauses, read once for rules 1 and 4 (one plain read; the pauses themselves,
    # for their reasons, only when there are some, and kept while they stand).
    scopes = pauses.active_pause_scopes()
    # Rule 4: what the owners' mailboxes may still send today, per domain (None: no mailbox of
    # its own). An owner with mailboxes sends from their domains: a pause of its organization's
    # sender domain does not stop it (a paused domain's mailboxes are left out of its room).
    mailbox_room = mailbox_room_today(owner_ids=ids, budget=budget, scopes=scopes, mailboxes=mailboxes)
    paused = pauses.blocking(
        owner_ids=ids,
        mailbox_owners={o for o, room in mailbox_room.items() if room is not None},
        organizations={o.rules.owner_id: (o.organization_id, o.sender_domain) for o in owners},
        scopes=scopes,
        kept=reads.active_pauses_load(scopes) if scopes else None,
    )
    facts = [
        OwnerFacts(
            rules=o.rules,
            organization_id=o.organization_id,
            sender_domain=o.sender_domain,
            sent_today=committed[o.rules.owner_id].sent,
            in_flight=committed[o.rules.owner_id].in_flight,
            drafts=committed[o.rules.owner_id].drafts,
            review_required=o.review_required,
            draft_ahead_days=o.draft_ahead_days,
            paused=paused.owners.get(o.rules.owner_id, ""),
            mailbox_room=mailbox_room.get(o.rules.owner_id),
        )
        for o in owners
    ]
    domains = budget.domain_days(
        domains=sorted({d for f in facts for d in f.sender_domains}), now_ms=int(now.timestamp() * 1000)
    )
    spend = reads.organization_spend(
        organization_ids={o.organization_id for o in owners}, now=now, job_cost=price, spend_caps=spend_caps
    )
    capped = {o.rules.owner_id for o in owners if o.organization_id in spend}
    decisions, shared = owner_admission(
        owners=facts,
        now=now,
        domains=domains,
        spend=spend,
        job_cost={owner: price(owner, None) for owner in capped},
        elsewhere=_pending_elsewhere(elsewhere, work=work, mailboxes=mailboxes, scopes=scopes),
    )
    return Admitted(
        send_room={o: d.send for o, d in decisions.items() if d.send > 0},
        llm_room={o: d.llm for o, d in decisions.items() if d.llm > 0},
        deferred={o: d.reason for o, d in decisions.items() if d.llm <= 0},
        paused_tiers=paused.tiers,
        shared=shared,
        closed=Closed(
            scopes=scopes,
            paused=paused.whole,
            spent={org: shared.spend_reason[org] for org, left in shared.spend_left.items() if left <= 0},
            domains={d: shared.domain_reason[d] for d, room in shared.domain_room.items() if room <= 0},
        ),
    )


def _pending_elsewhere(
    owners: Sequence[reads.ActiveOwner],
    *,
    work: reads.CommittedWork,
    mailboxes: Mapping[int, Sequence[Mailbox]],
    scopes: list[pauses.PauseScope],
) -> Counter[str]:
    """Per sender domain, the work in flight and drafts of these owners (not judged) that will
    leave from it: each owner's on each domain of its usable mailboxes (it may leave from any),
    else on its organization's sender domain."""
    domains = mailbox_domains(
        owner_ids=[o.rules.owner_id for o in owners], mailboxes=mailboxes, scopes=scopes
    )
    pending: Counter[str] = Counter()
    for o in owners:
        owner_id = o.rules.owner_id
        count = work.in_flight.get(owner_id, 0) + work.drafts.get(owner_id, 0)
        theirs = domains[owner_id]
        for domain in (o.sender_domain,) if theirs is None else theirs:
            pending[domain] += count
    return pending


def unsendable_drop(candidates: Candidates, *, now: datetime) -> Candidates:
    """Rule 8: cancel the loaded rows whose lead may not be emailed any more (saying why), and
    return the candidates without them, so their slots go to other rows this cycle."""
    ids = [row.outreach_id for by_owner in candidates.values() for rows in by_owner.values() for row in rows]
    refused = unsendable_rows(lead_status=reads.suppressed_leads(outreach_ids=ids))
    if not refused:
        return candidates
    by_reason: dict[str, list[int]] = {}
    for outreach_id, reason in refused.items():
        by_reason.setdefault(reason, []).append(outreach_id)
    with transaction.atomic():
        for reason, rows in by_reason.items():
            transition_many(outreach_ids=rows, from_=State.QUEUED, to=State.CANCELLED, note=reason, at=now)
    return _without(candidates, set(refused))


def picks_admit(
    *,
    candidates: Candidates,
    shared: Shared,
    select: Callable[[Candidates], Selection],
    price: Callable[[int, str | None], Decimal] | None = None,
) -> tuple[Candidates, Selection]:
    """Rules 6 and 7 on the picks: `select` runs the batch; picks past a sender domain's or an
    organization's shared room are refused and say why, their owners keep only the rows that
    were admitted, and the batch runs again so the refused slots go to other owners. `price`
    (owner id, kind) -> what a capped organization's row reserves of its spend. Returns the
    candidates the final selection was made from, and that selection (all admitted)."""
    refused_all: dict[int, str] = {}
    selection = select(candidates)
    for round_ in range(RESELECT_ROUNDS + 1):
        picks = [(p.outreach_id, p.owner_id) for p in selection.picks]
        verdicts = picks_admission(picks=picks, shared=shared, row_cost=_pick_costs(selection, shared, price))
        if not verdicts.refused:
            break
        refused_all |= verdicts.refused
        admitted = set(verdicts.admitted)
        stopped = {owner for row, owner in picks if row in verdicts.refused}
        if round_ == RESELECT_ROUNDS:
            # The last round keeps only what was admitted, every owner's other rows dropped:
            # a selection again over owners not yet checked would pick past the rooms (until
            # 2026-12-06 it kept the unpicked owners' rows, and a domain with room for 5 of
            # 20 picks started 20 jobs).
            stopped = {owner for by_owner in candidates.values() for owner in by_owner}
        candidates = _only(candidates, owners=stopped, rows=admitted)
        selection = select(candidates)
    _say(refused_all)
    return candidates, selection


def _pick_costs(
    selection: Selection, shared: Shared, price: Callable[[int, str | None], Decimal] | None
) -> dict[int, Decimal]:
    """Pick's row id -> its reserved cost, for the picks of owners in capped organizations (the
    rest reserve no spend): the picks', not every candidate row's (thousands at 10,000 owners,
    2.5 ms a cycle, bench/dispatch.py --controls, 2026-12-07)."""
    if price is None or not shared.spend_left:
        return {}
    return {
        p.outreach_id: price(p.owner_id, p.tier.name.lower())
        for p in selection.picks
        if shared.org_of.get(p.owner_id) in shared.spend_left
    }


def _say(refused: Mapping[int, str]) -> None:
    by_reason: dict[str, list[int]] = {}
    for outreach_id, reason in refused.items():
        by_reason.setdefault(reason, []).append(outreach_id)
    for reason, rows in by_reason.items():
        Outreach.objects.filter(id__any=rows, state=State.QUEUED).update(blocked_reason=reason)


def _without(candidates: Candidates, rows: set[int]) -> Candidates:
    return {
        tier: {o: [r for r in found if r.outreach_id not in rows] for o, found in by_owner.items()}
        for tier, by_owner in candidates.items()
    }


def _only(candidates: Candidates, *, owners: set[int], rows: set[int]) -> Candidates:
    """`owners` keep only their rows in `rows`; the other owners keep all theirs."""
    return {
        tier: {
            o: [r for r in found if r.outreach_id in rows] if o in owners else found
            for o, found in by_owner.items()
        }
        for tier, by_owner in candidates.items()
    }
