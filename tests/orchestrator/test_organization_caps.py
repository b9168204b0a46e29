"""An organization's own LLM cap (Organization.llm_rpm / llm_tpm): a share of the provider key.

The dispatcher reserves a capped organization's work from its scope as well as the provider's,
so the cap bounds what it dispatches while other organizations keep the rest of the key; the
generation worker paces each call in the organization's window too. The admin refuses a cap
one outreach could never get through.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from nurture.generation import outreach_generate
from orchestrator.budget import PROVIDER, Budget, Reservation, organization_scope
from orchestrator.dispatch import dispatch_cycle
from orchestrator.selectors import organization_caps
from outreach.models import Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.llm_stub import LLMStub
from tests.security.admin_forms import form_values

pytestmark = pytest.mark.django_db


def test_capped_organization_gets_its_cap_and_the_others_the_rest(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given two organizations with 5 intros each; the first may make 6 requests/min (2 outreach)
    settings.DISPATCH_MAX_IN_FLIGHT = 20
    capped, free = make_org(llm_rpm=6), make_org()
    capped_ids = [make_outreach(lead=make_lead(owner=make_owner(organization=capped))).pk for _ in range(5)]
    free_ids = [make_outreach(lead=make_lead(owner=make_owner(organization=free))).pk for _ in range(5)]
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=True):
        report = dispatch_cycle(budget=budget)
    # then the capped organization got what its bucket holds, the other all its work
    claimed = set(report.generation)
    assert set(free_ids) <= claimed
    got = [i for i in capped_ids if i in claimed]
    assert 1 <= len(got) <= 2
    # its claimed rows reserved from its scope, and the rest say why they wait
    scope = organization_scope(capped.pk)
    reservation_ids = Outreach.objects.filter(id__in=got).values_list("reservation_id", flat=True)
    assert all(rid.endswith(f"@{PROVIDER},{scope}") for rid in reservation_ids)
    waiting = Outreach.objects.filter(id__in=set(capped_ids) - claimed)
    assert {row.state for row in waiting} == {State.QUEUED}
    assert {row.blocked_reason for row in waiting} == {f"organization LLM cap reached ({scope}:requests)"}


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


def test_caps_follow_admin_edits_and_half_caps_take_the_providers_other_half(settings: Any) -> None:
    org = make_org(llm_tpm=50_000)
    caps = organization_caps()
    limits = caps[organization_scope(org.pk)]
    assert (limits.rpm, limits.tpm) == (settings.LLM_RPM, 50_000)
    org.llm_tpm = None
    org.save()
    assert organization_caps() == {}


def test_a_cap_no_outreach_fits_is_ignored_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    org = make_org(llm_rpm=1)  # written around the admin's check
    with caplog.at_level(logging.ERROR, logger="orchestrator.selectors"):
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
    client = Client()
    client.force_login(User.objects.create_superuser("root", password="pw"))
    url = reverse("admin:outreach_organization_change", args=[org.pk])
    # when the cap is set too low for one outreach
    response = client.post(url, form_values(client, url) | {field: value})
    # then the form says which field and what would work, and nothing is saved
    assert response.status_code == 200
    assert response.context["adminform"].form.errors[field] == [message]
    org.refresh_from_db()
    assert getattr(org, field) is None
