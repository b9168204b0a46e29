"""nurture.review.draft_approve: a reviewer's edit passes the same policy as the model's draft."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from nurture.review import draft_approve
from outreach.models import OutreachEvent, State
from tests.factories import (
    DRAFT_BODY,
    EDITED_BODY,
    make_draft,
    make_lead,
    make_org,
    make_owner,
    make_reviewer,
)

pytestmark = pytest.mark.django_db


def test_an_edit_that_breaks_the_policy_is_refused_and_changes_nothing() -> None:
    # given a draft of an organization whose emails may link to acme.com only
    org = make_org(allowed_link_domains="acme.com")
    draft = make_draft(lead=make_lead(owner=make_owner(organization=org)))
    # when a reviewer approves it with a link to another domain
    with pytest.raises(ValidationError) as refused:
        draft_approve(outreach=draft, by=make_reviewer(), body=EDITED_BODY + " https://evil.example/x")
    # then the policy's sentence says why, and the draft still waits, as it was
    assert refused.value.messages == ["body: link to 'evil.example' is not an allowed domain"]
    draft.refresh_from_db()
    assert (draft.state, draft.draft_body) == (State.AWAITING_APPROVAL, DRAFT_BODY)


def test_an_edit_within_the_policy_is_approved_as_edited() -> None:
    # given a draft of an organization whose emails may link to acme.com
    draft = make_draft(
        lead=make_lead(owner=make_owner(organization=make_org(allowed_link_domains="acme.com")))
    )
    # when the reviewer's edit links there
    draft_approve(outreach=draft, by=make_reviewer(), body=EDITED_BODY + " https://acme.com/demo")
    # then it is approved with the edit
    draft.refresh_from_db()
    assert (draft.state, draft.draft_body) == (State.APPROVED, EDITED_BODY + " https://acme.com/demo")
    assert OutreachEvent.objects.get(outreach=draft, to_state=State.APPROVED).note == "edited and approved"


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ("", "subject: empty (an email needs a subject)"),
        ("Hello\r\nBcc: all@x.example", "subject: must be one line"),
    ],
)
def test_an_edited_subject_must_be_one_nonempty_line(subject: str, expected: str) -> None:
    draft = make_draft()
    with pytest.raises(ValidationError) as refused:
        draft_approve(outreach=draft, by=make_reviewer(), subject=subject)
    assert expected in refused.value.messages


def test_an_edit_with_a_phone_number_is_refused_by_default() -> None:
    # given a draft of an organization that has not allowed phone numbers
    draft = make_draft(lead=make_lead(owner=make_owner(organization=make_org())))
    # when a reviewer's edit adds one, then the policy refuses it
    with pytest.raises(ValidationError) as refused:
        draft_approve(outreach=draft, by=make_reviewer(), body=EDITED_BODY + " Call me at (415) 555-0132.")
    assert refused.value.messages == [
        "body: phone number '(415) 555-0132' (not allowed for this organization)"
    ]


def test_an_edit_with_a_phone_number_is_approved_where_the_organization_allows_them() -> None:
    draft = make_draft(lead=make_lead(owner=make_owner(organization=make_org(allow_phone_numbers=True))))

    draft_approve(outreach=draft, by=make_reviewer(), body=EDITED_BODY + " Call me at (415) 555-0132.")

    draft.refresh_from_db()
    assert draft.state == State.APPROVED
