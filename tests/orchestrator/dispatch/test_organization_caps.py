"""An organization's own LLM cap (Organization.llm_rpm / llm_tpm): a share of the provider key.

The dispatcher reserves a capped organization's work from its scope as well as the provider's,
so the cap bounds what it dispatches while other organizations keep the rest of the key; the
generation worker paces each call in the organization's window too. The admin refuses a cap
one outreach could never get through.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from config import redis_client
from devtools.llm_stub import LLMStub
from nurture.writing.generation import outreach_generate
from orchestrator.budget import PROVIDER, Budget, Reservation, organization_scope
from orchestrator.dispatch import reads
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.dispatch.cycle.reservation import picks_reserve_and_claim
from orchestrator.dispatch.deployment_plan import routing_plan
from orchestrator.dispatch.reads import (
    active_owners,
    organization_caps,
    organization_caps_load,
    ready_candidates,
)
from orchestrator.dispatch.selection import Pick
from outreach.models import Lead, Organization, Outreach, State
from outreach.tiers import Tier
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.security.admin_forms import form_values, superuser_client

pytestmark = pytest.mark.django_db


def test_capped_organization_gets_its_cap_and_the_others_its_slots_in_the_same_cycle(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given 6 slots; an organization capped at 6 requests/min (one outreach in its bucket now)
    # whose 3 owners each have work, and another organization with plenty of work
    settings.DISPATCH_MAX_IN_FLIGHT = 6
    capped, free = make_org(llm_rpm=6), make_org()
    capped_ids = [make_outreach(lead=make_lead(owner=make_owner(organization=capped))).pk for _ in range(3)]
    free_owners = [make_owner(organization=free) for _ in range(3)]
    free_ids = [make_outreach(lead=make_lead(owner=free_owners[i % 3])).pk for i in range(9)]
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=True):
        report = dispatch_cycle(budget=budget)
    # then the capped organization got what its bucket holds, and the other every other slot:
    # round-robin alone would have spent 3 slots on the capped owners and wasted 2 of them
    claimed = set(report.generation)
    got = [i for i in capped_ids if i in claimed]
    assert len(got) == 1
    assert len(claimed & set(free_ids)) == 5
    # the capped organization's outreach reserved from its scope as well
    scope = organization_scope(capped.pk)
    reservation_id = Outreach.objects.get(pk=got[0]).reservation_id
    assert reservation_id.endswith(f"@{PROVIDER},{scope}")


def test_the_capped_organizations_turn_moves_between_its_owners_with_the_cursor(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given an organization whose bucket takes one outreach a cycle, and three owners with work
    capped = make_org(llm_rpm=6)
    owners = [make_owner(organization=capped) for _ in range(3)]
    for owner in owners:
        make_outreach(lead=make_lead(owner=owner))
    # when three cycles run at the same instant (no clock involved), the bucket emptied in between
    served = []
    now = timezone.now() + timedelta(minutes=1)
    for _ in range(3):
        budget.reset()
        with django_capture_on_commit_callbacks(execute=True):
            report = dispatch_cycle(budget=budget, now=now)
        served += [pick.owner_id for pick in report.picks]
        Outreach.objects.filter(state=State.DISPATCHED).update(state=State.QUEUED, reservation_id="")
    # then the persisted cursor gave each owner the turn once, in order
    assert served == [owner.pk for owner in owners]


def test_within_a_capped_organization_a_reply_gets_the_turn_first(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given an organization whose bucket takes one outreach now: one owner with an intro, one
    # (created later, so later in id order) with a reply
    capped = make_org(llm_rpm=6)
    intro = make_outreach(lead=make_lead(owner=make_owner(organization=capped)))
    reply = make_outreach(lead=make_lead(owner=make_owner(organization=capped)), kind=Outreach.Kind.REPLY)
    # when two cycles run (the cursor moving on in between), the bucket emptied in between
    for _ in range(2):
        budget.reset()
        with django_capture_on_commit_callbacks(execute=True):
            report = dispatch_cycle(budget=budget)
        # then the reply is served whatever the turn, as everywhere else (reply-first)
        assert report.generation == [reply.pk]
        Outreach.objects.filter(pk=reply.pk).update(state=State.QUEUED, reservation_id="")
    assert Outreach.objects.get(pk=intro.pk).state == State.QUEUED


def test_picks_the_cap_refuses_at_reservation_stay_queued_and_say_why(budget: Budget) -> None:
    # given an organization's bucket emptied between the cycle's look and its reservation
    # (its workers' calls came first), and two of its picks
    capped = make_org(llm_rpm=6)
    owner = make_owner(organization=capped)
    ids = [make_outreach(lead=make_lead(owner=owner)).pk for _ in range(2)]
    groups = active_owners().capped(organization_caps_load(budget=budget)).scopes
    scope = organization_scope(capped.pk)
    assert isinstance(budget.reserve(requests=3, tokens=1_800, scopes=(PROVIDER, scope)), Reservation)
    picks = [Pick(outreach_id=i, owner_id=owner.pk, tier=Tier.INTRO, reason="test") for i in ids]
    # when they are reserved and claimed
    routing = routing_plan(budget=budget, client=redis_client.shared(), count=len(picks))
    claimed = picks_reserve_and_claim(
        picks=picks, budget=budget, groups=groups, now=timezone.now(), routing=routing
    )
    # then none is claimed, and each says which bucket stopped it
    assert claimed == []
    rows = Outreach.objects.filter(id__in=ids)
    assert {(row.state, row.blocked_reason) for row in rows} == {
        (State.QUEUED, f"organization LLM cap reached ({scope}:requests)")
    }


def test_generation_paces_its_calls_in_the_organizations_window(
    budget: Budget, llm_stub: LLMStub, settings: Any
) -> None:
    # given a dispatched outreach of an organization capped at 30 requests/min
    org = make_org(llm_rpm=30)
    settings.DISPATCH_MAX_IN_FLIGHT = 20
    scope = organization_scope(org.pk)
    budget.set_scope_limits(organization_caps())
    reservation = budget.reserve(requests=3, tokens=1_800, scopes=(PROVIDER, scope))
    assert isinstance(reservation, Reservation)
    outreach = make_outreach(
        lead=make_lead(owner=make_owner(organization=org)),
        state=State.DISPATCHED,
        reservation_id=reservation.id,
    )
    # when the worker writes it
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DISPATCHED
    # then its three calls count in the organization's window as well as the provider's
    snapshot = budget.snapshot(scopes=(PROVIDER, scope))["scopes"]
    assert (snapshot[PROVIDER]["calls_in_window"], snapshot[scope]["calls_in_window"]) == (3, 3)


def _fresh(budget: Budget) -> Budget:
    """Another process's budget on the same keys, which has read no organization's cap yet."""
    return Budget(redis_client=budget._redis, limits=budget.limits)


def _capped_reservation(budget: Budget, org_id: int) -> str:
    budget.set_scope_limits(organization_caps())
    reservation = budget.reserve(requests=3, tokens=1_800, scopes=(PROVIDER, organization_scope(org_id)))
    assert isinstance(reservation, Reservation)
    return reservation.id


def test_a_fresh_dispatcher_refunds_a_stuck_capped_reservation(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given work stuck in GENERATING for an hour, holding a reservation in its organization's scope
    org = make_org(llm_rpm=30)
    held = _capped_reservation(budget, org.pk)
    stuck = make_outreach(
        lead=make_lead(owner=make_owner(organization=org)),
        state=State.GENERATING,
        reservation_id=held,
        state_changed_at=timezone.now() - timedelta(hours=1),
    )
    # when a dispatcher process runs its first cycle (recovery comes before anything else)
    dispatcher = _fresh(budget)
    with django_capture_on_commit_callbacks(execute=True):
        report = dispatch_cycle(budget=dispatcher)
    # then the work is recovered and its reservation refunded, not left to expire
    assert report.recovered == 1
    assert Outreach.objects.get(pk=stuck.pk).reservation_id != held
    assert dispatcher.refund(reservation_id=held) is False  # already given back


def test_a_job_that_stops_before_its_calls_refunds_its_capped_reservation(budget: Budget) -> None:
    # given a dispatched outreach of a capped organization whose lead has opted out since
    org = make_org(llm_rpm=30)
    lead = make_lead(owner=make_owner(organization=org), status=Lead.Status.OPTED_OUT)
    outreach = make_outreach(
        lead=lead, state=State.DISPATCHED, reservation_id=_capped_reservation(budget, org.pk)
    )
    # when a worker process that has read no cap yet takes it
    worker = _fresh(budget)
    assert outreach_generate(outreach_id=outreach.pk, budget=worker) == State.CANCELLED
    # then its reservation is refunded in both scopes
    assert worker.snapshot()["in_flight"] == 0


def test_caps_follow_admin_edits_and_half_caps_take_the_providers_other_half(settings: Any) -> None:
    org = make_org(llm_tpm=50_000)
    caps = organization_caps()
    limits = caps[organization_scope(org.pk)]
    assert (limits.rpm, limits.tpm) == (settings.LLM_RPM, 50_000)
    org.llm_tpm = None
    org.save()
    assert organization_caps() == {}


def test_caps_are_read_once_and_then_only_the_owners_version_until_an_organization_is_written() -> None:
    # given two capped organizations, their caps read once (a dispatcher's cycle, a worker's job)
    first, second = make_org(llm_rpm=60), make_org(llm_tpm=50_000)
    organization_caps()
    # when they are asked for again, nothing having changed
    with CaptureQueriesContext(connection) as queries:
        again = organization_caps()
    # then one statement read the owners' version and none the organizations: at a thousand
    # capped organizations their read was 12.7 ms of every cycle (bench/dispatch.py
    # --organizations 1000, 2026-12-07)
    assert [q["sql"] for q in queries.captured_queries] == [
        "SELECT token::text FROM outreach_ownersversion WHERE id = 1"
    ]
    assert sorted(again) == sorted([organization_scope(first.pk), organization_scope(second.pk)])
    # and when an organization is written, however, the next read has the change
    Organization.objects.filter(pk=second.pk).update(llm_tpm=None)
    assert list(organization_caps()) == [organization_scope(first.pk)]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE outreach_organization SET llm_rpm = 90 WHERE id = %s", [first.pk])
    assert organization_caps()[organization_scope(first.pk)].rpm == 90


def test_a_cap_no_outreach_fits_is_ignored_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    org = make_org(llm_rpm=1)  # written around the admin's check
    with caplog.at_level(logging.ERROR, logger="orchestrator.dispatch.reads"):
        assert organization_caps() == {}
    assert f"organization {org.pk}: LLM cap ignored: llm_rpm 1" in caplog.text


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("llm_rpm", 2, "llm_rpm 2: one outreach makes 3 calls, so allow at least 3 requests/min."),
        ("llm_tpm", 1_000, "llm_tpm 1000: one outreach needs about 1800 tokens, so allow at least 1800/min."),
    ],
)
def test_admin_refuses_a_cap_no_outreach_could_get_through(field: str, value: int, message: str) -> None:
    # given an organization and its change form
    org = make_org()
    client = superuser_client()
    url = reverse("admin:outreach_organization_change", args=[org.pk])
    # when the cap is set too low for one outreach
    response = client.post(url, form_values(client, url) | {field: value})
    # then the form says which field and what would work, and nothing is saved
    assert response.status_code == 200
    assert response.context["adminform"].form.errors[field] == [message]
    org.refresh_from_db()
    assert getattr(org, field) is None


def test_a_cycle_over_many_small_capped_organizations_loads_a_few_rows_an_owner(
    budget: Budget, settings: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    """Each capped organization's owners are a budget group, and the safe k of a group's owner
    is the group's slots less its other owners with work: nearly every row of every owner of a
    small organization (213 ms of candidates a cycle at 100 organizations, bench/dispatch.py
    --organizations 100, 2026-12-07). The cycle loads a guess and loads whole only an owner
    whose rows the selection ran dry."""
    # given 20 slots and 10 capped organizations of 2 owners, each owner with 8 intros, each
    # organization's cap roomy (a cap above the provider's settings is theirs)
    settings.DISPATCH_MAX_IN_FLIGHT = 20
    settings.LLM_RPM, settings.LLM_TPM = 60_000, 60_000_000
    orgs = [make_org(llm_rpm=60_000, llm_tpm=60_000_000) for _ in range(10)]
    owners = [make_owner(organization=org) for org in orgs for _ in range(2)]
    for owner in owners:
        for _ in range(8):
            make_outreach(lead=make_lead(owner=owner))
    loaded: list[int] = []

    def counted(**kwargs: Any) -> dict[int, list[Any]]:
        found = ready_candidates(**kwargs)
        loaded.append(sum(len(rows) for rows in found.values()))
        return found

    monkeypatch.setattr(reads, "ready_candidates", counted)
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=False):
        report = dispatch_cycle(budget=budget)
    # then it claims its 20 slots, one intro an owner, from 4 rows an owner: twice the 2 picks
    # an owner may take in tokens before every other has had one (the safe k, 19 an owner,
    # loaded all 8 of each: 160)
    assert len(report.generation) == 20
    assert set(Outreach.objects.filter(id__in=report.generation).values_list("owner_id", flat=True)) == {
        o.pk for o in owners
    }
    assert sum(loaded) == 80
