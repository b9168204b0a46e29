"""The claim reserves its picks in pick order, each its owner's learned size, in one round trip
to the budget a deployment: owners' learned sizes all differ once they have finished jobs, and
a reservation call per pick made the claim of 500 picks three times slower (bench/dispatch.py,
2026-12-05)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import redis

from orchestrator.budget import Budget, Limits
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.dispatch.owner_tokens import owner_tokens_record
from outreach.models import Outreach
from tests.factories import make_lead, make_org, make_outreach, make_owners

pytestmark = pytest.mark.django_db


class _CountingBudget(Budget):
    """The real budget, counting the reservation scripts it runs: its own, since Redis's command
    statistics are the whole server's, which other test processes share."""

    reserves = 0

    def run(self, name: str, keys: Sequence[str | bytes], args: Sequence[Any], **kwargs: Any) -> Any:
        self.reserves += name == "RESERVE"
        return super().run(name, keys, args, **kwargs)


def _claim(redis_client: redis.Redis, captured: Any, *, sizes: list[int]) -> tuple[int, dict[int, str]]:
    """A cycle over one queued intro per owner, each owner having learned its size: the
    reservation scripts the cycle ran, and each claimed row's reservation record
    ("<requests>:<tokens>")."""
    budget = _CountingBudget(
        redis_client=redis_client, limits=Limits(rpm=100_000, tpm=100_000_000, burst_ms=60_000)
    )
    owners = make_owners(len(sizes), organization=make_org())
    for owner, size in zip(owners, sizes, strict=True):
        make_outreach(lead=make_lead(owner=owner))
        owner_tokens_record(owner_id=owner.pk, settled=size, counted=size, kind="intro")
    with captured(execute=False):
        report = dispatch_cycle(budget=budget)
    assert len(report.generation) == len(sizes)
    records = {
        row.owner_id: redis_client.hget(budget.key("res"), row.reservation_id)
        for row in Outreach.objects.filter(id__in=report.generation)
    }
    return budget.reserves, {
        owner: str(record, "ascii") for owner, record in records.items() if isinstance(record, bytes)
    }


def test_picks_of_many_learned_sizes_are_reserved_in_one_round_trip_each_their_own_size(
    redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given 30 owners whose jobs all cost the same, then 30 more whose jobs each cost their own
    same, _ = _claim(redis_client, django_capture_on_commit_callbacks, sizes=[2_000] * 30)
    Outreach.objects.all().delete()
    sizes = [2_000 + 7 * i for i in range(30)]
    differing, records = _claim(redis_client, django_capture_on_commit_callbacks, sizes=sizes)
    # then the claim ran as many reservation scripts for the differing sizes as for the equal
    # ones (one a deployment the picks use)
    assert 0 < differing == same
    # and each claimed row's reservation holds its owner's learned size
    assert sorted(int(record.split(":")[1]) for record in records.values()) == sizes
