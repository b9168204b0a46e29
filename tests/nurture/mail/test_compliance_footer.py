"""The organization's compliance footer: appended by code at send time, never by the model;
on the wire below the draft; edited only with the settings permission; shown to reviewers."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from devtools.llm_stub import LLMStub
from devtools.smtp_sink import SMTPSink
from nurture.mail.sending import outreach_send
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from outreach.models import Organization, State
from tests.factories import logged_in, make_draft, make_lead, make_org, make_outreach, make_owner, make_user
from tests.security.admin_forms import form_values, reviewer_client

pytestmark = pytest.mark.django_db

FOOTER = (
    "Seller Ltd, 1 Main Street, Springfield 12345\nNot interested? Reply STOP and we will not write again."
)


def test_footer_is_on_the_wire_and_not_in_what_the_model_wrote(
    budget: Budget, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given an autonomous owner in an organization with a footer, its intro dispatched
    org = make_org(compliance_footer=FOOTER)
    reservation = budget.reserve(requests=3, tokens=1800)
    assert isinstance(reservation, Reservation)
    lead = make_lead(owner=make_owner(organization=org))
    outreach = make_outreach(lead=lead, state=State.DISPATCHED, reservation_id=reservation.id)
    # when it is written and sent
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DISPATCHED
    assert outreach_send(outreach_id=outreach.pk) == State.SENT
    # then the model was never shown the footer and its draft has none
    assert all("Main Street" not in str(request.json) for request in llm_stub.requests)
    outreach.refresh_from_db()
    assert outreach.draft_body == "Hi there, a short note from the stub."
    # and the email carries the draft, then the footer below a signature separator
    message = smtp_sink.wait_for(1)[0].message
    assert message.get_content().replace("\r\n", "\n") == f"{outreach.draft_body}\n\n-- \n{FOOTER}\n"
    assert "unsubscribe" in message["List-Unsubscribe"]  # unchanged beside it


def _org_url(org: Organization) -> str:
    return reverse("admin:outreach_organization_change", args=[org.pk])


def test_a_member_with_the_settings_permission_sets_the_footer() -> None:
    org = make_org(name="Acme")
    user = make_user(
        permissions=("view_organization", "change_organization", "change_organization_settings"),
        organizations=[org],
    )
    client, url = logged_in(user), _org_url(org)

    response = client.post(url, form_values(client, url) | {"compliance_footer": FOOTER})

    assert response.status_code == 302, response.content.decode()[:2000]
    org.refresh_from_db()
    assert org.compliance_footer == FOOTER


def test_without_the_settings_permission_the_footer_is_read_only() -> None:
    org = make_org(name="Acme", compliance_footer="Acme Inc, 2 Side St")
    user = make_user(permissions=("view_organization", "change_organization"), organizations=[org])
    client, url = logged_in(user), _org_url(org)

    response = client.post(url, form_values(client, url) | {"compliance_footer": "nothing to see"})

    assert response.status_code == 302
    org.refresh_from_db()
    assert org.compliance_footer == "Acme Inc, 2 Side St"


def test_reviewer_sees_the_footer_that_will_go_out_below_the_draft(settings: Any) -> None:
    org = make_org(compliance_footer="Acme Inc, 2 Side St <Springfield>")
    draft = make_draft(lead=make_lead(owner=make_owner(organization=org)))
    _, client = reviewer_client(orgs=[org])

    page = client.get(reverse("admin:outreach_draftforapproval_change", args=[draft.pk])).content.decode()

    assert "Added below at send time" in page
    assert "-- \nAcme Inc, 2 Side St &lt;Springfield&gt;" in page  # escaped: the footer is text
