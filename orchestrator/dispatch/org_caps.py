"""Organizations' own LLM caps in the dispatch cycle (Organization.llm_rpm / llm_tpm).

Loaded into the budget before anything touches a capped scope (a scope without limits can be
neither reserved, settled nor refunded): at the start of each dispatch cycle, before stuck
recovery refunds, and at the start of a generation job whose reservation names one. In the
cycle, used twice:
- before selection, the owners of a capped organization who have ready work share what its
  bucket can take now, so the fair selection does not spend slots on picks the cap would
  refuse: other organizations get those slots in the same cycle;
- at reservation, their picks reserve from the organization's scope as well as the provider's
  (orchestrator.dispatch), which is what really holds the cap.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from orchestrator.budget import PROVIDER, Budget, Limits, organization_scope, reservation_scopes
from orchestrator.dispatch import reads
from outreach.models import Owner
from outreach.tiers import Tier


def load_caps(budget: Budget) -> dict[str, Limits]:
    """Read the organizations' caps and give them to `budget` (one query: O(capped ones))."""
    caps = reads.organization_caps()
    budget.set_scope_limits(caps)
    return caps


def job_scopes(*, budget: Budget, reservation_id: str) -> tuple[str, ...]:
    """The scopes a job's calls, settle and refund use: those its reservation was made in (the
    dispatcher's decision, named by the id), with their caps loaded into `budget`. A cap
    removed since is dropped: the provider's limit still holds, and that reservation expires."""
    scopes = reservation_scopes(reservation_id)
    if scopes == (PROVIDER,):
        return scopes
    caps = load_caps(budget)
    return tuple(scope for scope in scopes if scope == PROVIDER or scope in caps)


@dataclass(frozen=True)
class OrganizationCaps:
    scope_of: Mapping[int, str]  # owner id -> its organization's scope; owners of capped ones only

    @classmethod
    def read(cls, *, caps: Mapping[str, Limits], owner_ids: Iterable[int]) -> OrganizationCaps:
        """The scopes of these owners under `caps` (no query without caps; one with:
        O(owners))."""
        if not caps:
            return cls({})
        rows = Owner.objects.filter(id__in=list(owner_ids)).values_list("id", "organization_id")
        return cls({owner: organization_scope(org) for owner, org in rows if organization_scope(org) in caps})

    def scopes(self, owner_id: int) -> tuple[str, ...]:
        """The budget scopes an owner's outreach reserve from."""
        scope = self.scope_of.get(owner_id)
        return (PROVIDER, scope) if scope else (PROVIDER,)

    def limit_room(
        self, *, room: Mapping[int, int], budget: Budget, cost: tuple[int, int], now: datetime, turn: int
    ) -> dict[int, int]:
        """`room` with each capped organization's owners who have ready work sharing what its
        bucket fits now: equal parts, and the remainder to owners whose best ready work is in
        the best tier (replies first), rotating within a tier as `turn` (the cycle's number)
        advances, so none of them waits for ever behind the others."""
        limited = dict(room)
        members: dict[str, list[int]] = defaultdict(list)
        for owner_id in sorted(room):
            if owner_id in self.scope_of and room[owner_id] > 0:
                members[self.scope_of[owner_id]].append(owner_id)
        for scope, owners in members.items():
            best = _best_ready_tier(owners, now=now)
            for owner_id in set(owners) - set(best):
                limited[owner_id] = 0  # nothing to send now: its part goes to the others
            if not best:
                continue
            fits = budget.headroom(scopes=(PROVIDER, scope)).fits(requests_each=cost[0], tokens_each=cost[1])
            base, extra = divmod(fits, len(best))
            bonus = set(_turn_order(best, turn=turn)[:extra])
            for owner_id in best:
                limited[owner_id] = min(limited[owner_id], base + int(owner_id in bonus))
        return limited


def _best_ready_tier(owner_ids: list[int], *, now: datetime) -> dict[int, Tier]:
    """Owner -> the best tier it has ready work in, for those of `owner_ids` that have any."""
    best: dict[int, Tier] = {}
    for tier in sorted(Tier, reverse=True):  # the best tier last, so it wins
        for owner_id in reads.owners_with_ready_work(tier=tier, owner_ids=owner_ids, now=now):
            best[owner_id] = tier
    return best


def _turn_order(best: Mapping[int, Tier], *, turn: int) -> list[int]:
    """Owners by their best tier, replies first; within a tier in id order rotated by `turn`."""
    order: list[int] = []
    for tier in sorted(set(best.values())):
        group = sorted(owner for owner, t in best.items() if t == tier)
        k = turn % len(group)
        order += group[k:] + group[:k]
    return order
