"""The organization admin (backoffice/admin/organizations.py): members, and LLM caps checked by the budget's
rule (tests/orchestrator/dispatch/test_organization_caps.py has the cap's refusals)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from tests.factories import make_org
from tests.security.admin_forms import form_values, superuser_client

pytestmark = pytest.mark.django_db


def test_organization_admin_edits_members() -> None:
    # given a superuser and a reviewer
    org = make_org(name="Acme")
    reviewer = User.objects.create_user("rev", is_staff=True)
    client = superuser_client()
    url = reverse("admin:outreach_organization_change", args=[org.pk])
    # when the superuser adds the reviewer as a member in the organization form
    response = client.post(url, form_values(client, url) | {"members": [reviewer.pk]})
    # then the reviewer is a member
    assert response.status_code == 302, response.content.decode()[:2000]
    assert list(org.members.all()) == [reviewer]


def test_organization_admin_saves_a_cap_one_outreach_fits(settings: Any) -> None:
    # given an organization and the budget's rule (3 calls of ~1,000 tokens per outreach)
    settings.LLM_CALLS_PER_OUTREACH, settings.LLM_EST_TOKENS_PER_CALL = 3, 1000
    org = make_org(name="Capped")
    client = superuser_client()
    url = reverse("admin:outreach_organization_change", args=[org.pk])
    # when the superuser caps it at exactly one outreach per minute
    response = client.post(url, form_values(client, url) | {"llm_rpm": 3, "llm_tpm": 3000})
    # then the cap is saved
    assert response.status_code == 302, response.content.decode()[:2000]
    org.refresh_from_db()
    assert (org.llm_rpm, org.llm_tpm) == (3, 3000)
