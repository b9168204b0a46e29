"""Bad input in the admin forms is a form error on the page, never a 500, and writes nothing.
CSRF protection is on for every admin POST."""

from __future__ import annotations

from datetime import time

import pytest
from django.test import Client
from django.urls import reverse

from outreach.models import Organization, Outreach, Owner, State
from tests.factories import (
    DRAFT_BODY,
    DRAFT_SUBJECT,
    EDITED_BODY,
    make_draft,
    make_lead,
    make_org,
    make_owner,
)
from tests.security.admin_forms import form_errors, form_values, reviewer_client, superuser_client

pytestmark = pytest.mark.django_db


def _draft() -> Outreach:
    return make_draft(lead=make_lead(owner=make_owner(review_required=True)))


def _approve(draft: Outreach, *, subject: str, body: str, client: Client | None = None) -> object:
    if client is None:
        _, client = reviewer_client(orgs=[draft.owner.organization])
    url = reverse("admin:outreach_draftforapproval_change", args=[draft.pk])
    return client.post(url, {"draft_subject": subject, "draft_body": body, "_approve": "1"})


# --- the approval form -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("subject", "body", "field", "message"),
    [
        ("", "A body.", "draft_subject", "needs a subject"),
        ("   ", "A body.", "draft_subject", "needs a subject"),
        ("Hello", "", "draft_body", "needs a body"),
        ("Hello", " \n\t ", "draft_body", "needs a body"),
        ("Hello\r\nBcc: everyone@example.com", "A body.", "draft_subject", "one line"),
        ("x" * 301, "A body.", "draft_subject", "at most 300 characters"),
        ("Hello", "Null \x00 byte", "draft_body", "Null characters are not allowed"),
        ("Hello", EDITED_BODY + " http://evil.example/x", "draft_body", "not an allowed domain"),
        ("Hello {first_name}", EDITED_BODY, "draft_subject", "unfilled placeholder"),
    ],
    ids=[
        "empty-subject",
        "blank-subject",
        "empty-body",
        "blank-body",
        "header-injection",
        "long-subject",
        "nul",
        "foreign-link",
        "placeholder",
    ],
)
def test_approving_a_bad_draft_is_a_form_error_and_changes_nothing(
    subject: str, body: str, field: str, message: str
) -> None:
    # given a draft awaiting approval
    draft = _draft()
    # when a reviewer approves it with a bad subject or body
    response = _approve(draft, subject=subject, body=body)
    # then the form comes back naming the field, and the draft still waits, as it was
    errors = form_errors(response)
    assert any(message in m for m in errors.get(field, [])), errors
    draft.refresh_from_db()
    assert (draft.state, draft.draft_subject, draft.draft_body) == (
        State.AWAITING_APPROVAL,
        DRAFT_SUBJECT,
        DRAFT_BODY,
    )


def test_rejecting_needs_no_subject_or_body() -> None:
    draft = _draft()
    _, client = reviewer_client(orgs=[draft.owner.organization])
    url = reverse("admin:outreach_draftforapproval_change", args=[draft.pk])
    response = client.post(url, {"draft_subject": "", "draft_body": "", "_reject": "1"})
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.state == State.REJECTED


def test_approving_a_draft_already_handled_says_so_instead_of_failing() -> None:
    # given a draft someone else approved while the form was open
    draft = _draft()
    _, client = reviewer_client(orgs=[draft.owner.organization])
    url = reverse("admin:outreach_draftforapproval_change", args=[draft.pk])
    Outreach.objects.filter(pk=draft.pk).update(state=State.APPROVED)
    # when this reviewer posts their approval
    response = client.post(
        url, {"draft_subject": "Mine", "draft_body": EDITED_BODY, "_approve": "1"}, follow=True
    )
    # then they land on a page (no 500) and the other decision stands, unedited
    assert response.status_code == 200
    draft.refresh_from_db()
    assert (draft.state, draft.draft_subject) == (State.APPROVED, DRAFT_SUBJECT)


# --- CSRF ------------------------------------------------------------------------------------------


def test_admin_post_without_csrf_token_is_refused() -> None:
    # given a logged-in reviewer whose client enforces CSRF like a browser session
    draft = _draft()
    _, client = reviewer_client(orgs=[draft.owner.organization], enforce_csrf_checks=True)
    url = reverse("admin:outreach_draftforapproval_change", args=[draft.pk])
    # when a POST arrives without the token (a cross-site form)
    response = client.post(
        url, {"draft_subject": "Hi", "draft_body": "Approved by a forged form.", "_approve": "1"}
    )
    bulk = client.post(
        reverse("admin:outreach_draftforapproval_changelist"),
        {"action": "approve_selected", "_selected_action": [draft.pk]},
    )
    # then both are refused with 403 and nothing changed
    assert (response.status_code, bulk.status_code) == (403, 403)
    draft.refresh_from_db()
    assert draft.state == State.AWAITING_APPROVAL


def test_admin_post_with_the_csrf_token_is_accepted() -> None:
    # the control: the same POST carrying the form's token goes through
    draft = _draft()
    _, client = reviewer_client(orgs=[draft.owner.organization], enforce_csrf_checks=True)
    url = reverse("admin:outreach_draftforapproval_change", args=[draft.pk])
    token = client.get(url).context["csrf_token"]
    response = client.post(
        url,
        {
            "draft_subject": "Hello",
            "draft_body": EDITED_BODY,
            "_approve": "1",
            "csrfmiddlewaretoken": str(token),
        },
    )
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.state == State.APPROVED


def test_login_post_without_csrf_token_is_refused() -> None:
    client = Client(enforce_csrf_checks=True)
    response = client.post(reverse("admin:login"), {"username": "root", "password": "pw"})
    assert response.status_code == 403


# --- the owner and organization forms ------------------------------------------------------------


OWNER_ADD = "admin:outreach_owner_add"


def _owner_data(client: Client, org: Organization, **changes: object) -> dict[str, object]:
    data = form_values(client, reverse(OWNER_ADD))
    data.update(
        organization=org.pk,
        name="Ada",
        kind="agent",
        daily_limit=40,
        hours_start="09:00",
        hours_end="17:00",
        timezone="Europe/Berlin",
        working_days="12345",
        weight=1,
    )
    data.update(changes)
    return data


def test_owner_form_valid_input_creates_the_owner() -> None:
    client, org = superuser_client(), make_org()
    response = client.post(reverse(OWNER_ADD), _owner_data(client, org))
    assert response.status_code == 302, form_errors(response)
    owner = Owner.objects.get(name="Ada")
    assert (owner.hours_start, owner.hours_end, owner.timezone) == (time(9), time(17), "Europe/Berlin")


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"hours_start": "17:00", "hours_end": "09:00"}, "hours_end", "must end after they start"),
        ({"hours_start": "09:00", "hours_end": "09:00"}, "hours_end", "must end after they start"),
        ({"hours_start": "25:00"}, "hours_start", "Enter a valid time"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", "not a known time zone"),
        ({"timezone": "../../etc/passwd"}, "timezone", "not a known time zone"),
        ({"timezone": ""}, "timezone", "This field is required"),
        ({"daily_limit": 0}, "daily_limit", "greater than or equal to 1"),
        ({"daily_limit": "lots"}, "daily_limit", "Enter a whole number"),
        ({"daily_limit": 10**12}, "daily_limit", "less than or equal to"),
        ({"working_days": "89"}, "working_days", "ISO weekday digits"),
        ({"weight": 0}, "weight", "greater than or equal to 1"),
        ({"nudge_days": "7,3"}, "nudge_days", "must rise"),
        ({"kind": "robot"}, "kind", "Select a valid choice"),
        ({"name": ""}, "name", "This field is required"),
        ({"name": "x" * 201}, "name", "at most 200 characters"),
        ({"name": "Nul\x00name"}, "name", "Null characters are not allowed"),
    ],
)
def test_owner_form_bad_input_is_a_form_error_and_writes_nothing(
    changes: dict[str, object], field: str, message: str
) -> None:
    # given a superuser on the owner form
    client, org = superuser_client(), make_org()
    # when the form is posted with one bad value
    response = client.post(reverse(OWNER_ADD), _owner_data(client, org, **changes))
    # then the page comes back with that field's error, and no owner exists
    errors = form_errors(response)
    assert any(message in m for m in errors.get(field, [])), errors
    assert not Owner.objects.exists()


def test_owner_form_edit_to_inverted_hours_keeps_the_stored_hours() -> None:
    client = superuser_client()
    owner = make_owner(hours_start=time(9), hours_end=time(17))
    url = reverse("admin:outreach_owner_change", args=[owner.pk])
    data = form_values(client, url) | {"hours_start": "18:00", "hours_end": "08:00"}
    errors = form_errors(client.post(url, data))
    assert "hours_end" in errors
    owner.refresh_from_db()
    assert (owner.hours_start, owner.hours_end) == (time(9), time(17))


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"name": ""}, "name", "This field is required"),
        ({"nudge_days": "3,,7"}, "nudge_days", "business-day offsets"),
        ({"nudge_days": "0,3"}, "nudge_days", "must rise from 1"),
        ({"llm_rpm": -5}, "llm_rpm", "greater than or equal to 0"),
        ({"sender_email": "not an address"}, "sender_email", "valid email address"),
    ],
)
def test_organization_form_bad_input_is_a_form_error(
    changes: dict[str, object], field: str, message: str
) -> None:
    client = superuser_client()
    url = reverse("admin:outreach_organization_add")
    data = form_values(client, url) | {"name": "Acme", "nudge_days": "3,7"} | changes
    errors = form_errors(client.post(url, data))
    assert any(message in m for m in errors.get(field, [])), errors
    assert not Organization.objects.exists()


@pytest.mark.parametrize(
    ("changes", "field", "message"),
    [
        ({"email": "not-an-address"}, "email", "valid email address"),
        ({"email": "a@b.example\r\nBcc: x@y.example"}, "email", "valid email address"),
        ({"timezone": "Europe/Atlantis"}, "timezone", "not a known time zone"),
        ({"status": "vip"}, "status", "Select a valid choice"),
    ],
)
def test_lead_form_bad_input_is_a_form_error(changes: dict[str, object], field: str, message: str) -> None:
    client, owner = superuser_client(), make_owner()
    url = reverse("admin:outreach_lead_add")
    data = (
        form_values(client, url)
        | {
            "organization": owner.organization_id,
            "owner": owner.pk,
            "email": "pat@prospect.example",
            "timezone": "UTC",
        }
        | changes
    )
    errors = form_errors(client.post(url, data))
    assert any(message in m for m in errors.get(field, [])), errors


def test_lead_form_duplicate_email_in_the_organization_is_a_form_error() -> None:
    client, lead = superuser_client(), make_lead()
    url = reverse("admin:outreach_lead_add")
    data = form_values(client, url) | {
        "organization": lead.organization_id,
        "owner": lead.owner_id,
        "email": lead.email,
        "timezone": "UTC",
    }
    errors = form_errors(client.post(url, data))
    assert "already exists" in " ".join(errors.get("__all__", [])), errors
