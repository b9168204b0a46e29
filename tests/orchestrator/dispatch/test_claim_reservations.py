"""The claim reserves its picks in pick order, each its owner's learned size, in one round trip
to the budget: owners' learned sizes all differ once they have finished jobs, and a reservation
call per pick made the claim of 500 picks three times slower (bench/dispatch.py, 2026-12-05);
the picks of many capped organizations interleave, and a call per run of one organization was
a call per pick again (bench/dispatch.py --organizations 100, 2026-12-07)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
import redis

from config.deployments import deployments
from orchestrator.budget import (
    PROVIDER,
    Budget,
    Headroom,
    Limits,
    organization_scope,
    reservation_ids,
    reservation_scopes,
)
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.dispatch.owner_tokens import owner_tokens_record
from outreach.models import Outreach
from tests.factories import make_lead, make_org, make_outreach, make_owners

pytestmark = pytest.mark.django_db


class _CountingBudget(Budget):
    """The real budget, counting the reservation scripts it runs and the rooms it is asked for:
    its own, since Redis's command statistics are the whole server's, which other test
    processes share."""

    reserves = 0

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rooms_read: Counter[tuple[str, ...]] = Counter()
        self.room_calls: list[list[tuple[str, ...]]] = []  # each call's sets of scopes

    def run(self, name: str, keys: Sequence[str | bytes], args: Sequence[Any], **kwargs: Any) -> Any:
        self.reserves += name == "RESERVE"
        return super().run(name, keys, args, **kwargs)

    def headrooms(self, scope_sets: Sequence[Sequence[str]]) -> list[Headroom]:
        self.rooms_read.update(tuple(scopes) for scopes in scope_sets)
        self.room_calls.append([tuple(scopes) for scopes in scope_sets])
        return super().headrooms(scope_sets)


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


def test_a_cycle_places_its_picks_on_the_plan_that_counted_its_slots(
    redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    """The slots are counted by placing jobs on the deployments' rooms; the claim's picks take
    that placement's routes in order, not a second placement read again from Redis a few
    milliseconds later (one plan's reads and placement: 8-10 ms of a 500-pick cycle,
    bench/dispatch.py 2026-12-06)."""
    # given 30 owners with a queued intro each
    budget = _CountingBudget(
        redis_client=redis_client, limits=Limits(rpm=100_000, tpm=100_000_000, burst_ms=60_000)
    )
    for owner in make_owners(30, organization=make_org()):
        make_outreach(lead=make_lead(owner=owner))
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=False):
        report = dispatch_cycle(budget=budget)
    # then every intro is claimed, each keeping its route
    assert len(report.generation) == 30
    assert all(Outreach.objects.filter(id__in=report.generation).values_list("llm_route", flat=True))
    # and each deployment's room was read once, by the one plan
    assert {scopes: n for scopes, n in budget.rooms_read.items() if len(scopes) == 1} == {
        (deployment.scope,): 1 for deployment in deployments()
    }


def test_a_cycle_reads_every_capped_organization_s_room_in_one_call(
    redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    """Each capped organization judged is a budget group whose room the cycle reads
    (generation._group_slots): in one script call for all of them, not one each (22 ms a cycle
    at 100 capped organizations, bench/dispatch.py --organizations 100, 2026-12-07)."""
    # given three organizations with their own LLM caps, an owner with work in each
    budget = _CountingBudget(
        redis_client=redis_client, limits=Limits(rpm=100_000, tpm=100_000_000, burst_ms=60_000)
    )
    orgs = [make_org(llm_rpm=6_000) for _ in range(3)]
    for org in orgs:
        make_outreach(lead=make_lead(owner=make_owners(1, organization=org)[0]))
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=False):
        report = dispatch_cycle(budget=budget)
    # then each organization's work is claimed
    assert len(report.generation) == 3
    # and the three organizations' rooms were read in one call, each with the provider's
    group_reads = [call for call in budget.room_calls if any(len(scopes) == 2 for scopes in call)]
    assert group_reads == [sorted((PROVIDER, organization_scope(org.pk)) for org in orgs)]


def test_the_picks_of_interleaved_capped_organizations_are_reserved_in_one_call(
    redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given three organizations with their own LLM caps, two owners with work in each, the
    # owners made in turn so that the cursor's order interleaves the organizations
    budget = _CountingBudget(
        redis_client=redis_client, limits=Limits(rpm=100_000, tpm=100_000_000, burst_ms=60_000)
    )
    orgs = [make_org(llm_rpm=6_000) for _ in range(3)]
    for _ in range(2):
        for org in orgs:
            make_outreach(lead=make_lead(owner=make_owners(1, organization=org)[0]))
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=False):
        report = dispatch_cycle(budget=budget)
    # then every pick is claimed, reserved in one call, each from its own organization's cap
    assert len(report.generation) == 6
    assert budget.reserves == 1
    scopes = Counter(
        reservation_scopes(rid)[1]
        for row in Outreach.objects.filter(id__in=report.generation)
        for rid in reservation_ids(row.reservation_id)
    )
    assert scopes == {organization_scope(org.pk): 2 for org in orgs}
