"""Organizations' own LLM caps in the dispatch cycle (Organization.llm_rpm / llm_tpm).

Read once a cycle, used twice:
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

from orchestrator import selectors
from orchestrator.budget import PROVIDER, Budget, organization_scope
from outreach.models import Owner
from outreach.tiers import Tier


@dataclass(frozen=True)
class OrganizationCaps:
    scope_of: Mapping[int, str]  # owner id -> its organization's scope; owners of capped ones only

    @classmethod
    def read(cls, *, budget: Budget, owner_ids: Iterable[int]) -> OrganizationCaps:
        """This cycle's caps, handed to the budget too (one query, two when some organization
        has a cap: O(capped organizations + owners))."""
        caps = selectors.organization_caps()
        budget.set_scope_limits(caps)
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
        bucket fits now: equal parts, the remainder going to different owners as `turn` (the
        cycle's number) advances, so none of them waits for ever behind the others."""
        limited = dict(room)
        members: dict[str, list[int]] = defaultdict(list)
        for owner_id in sorted(room):
            if owner_id in self.scope_of and room[owner_id] > 0:
                members[self.scope_of[owner_id]].append(owner_id)
        for scope, owners in members.items():
            ready = _with_ready_work(owners, now=now)
            for owner_id in set(owners) - set(ready):
                limited[owner_id] = 0  # nothing to send now: its part goes to the others
            if not ready:
                continue
            fits = budget.headroom(scopes=(PROVIDER, scope)).fits(requests_each=cost[0], tokens_each=cost[1])
            base, extra = divmod(fits, len(ready))
            for i, owner_id in enumerate(ready):
                share = base + (1 if (i - turn) % len(ready) < extra else 0)
                limited[owner_id] = min(limited[owner_id], share)
        return limited


def _with_ready_work(owner_ids: list[int], *, now: datetime) -> list[int]:
    """Those of `owner_ids` with ready work in any tier, in id order (an index probe each)."""
    found: set[int] = set()
    for tier in Tier:
        found |= set(selectors.owners_with_ready_work(tier=tier, owner_ids=owner_ids, now=now))
    return sorted(found)
