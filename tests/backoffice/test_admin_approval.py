from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from outreach.models import Organization, Outreach, OutreachEvent, State
from tests.factories import EDITED_BODY, logged_in, make_draft, make_outreach, make_user

pytestmark = pytest.mark.django_db

QUEUE_URL = "admin:outreach_draftforapproval_changelist"


def _staff(*, can_approve: bool) -> Client:
    permissions = ["view_outreach", "approve_outreach"] if can_approve else ["view_outreach"]
    # the queue shows members' organizations only
    return logged_in(
        make_user(f"staff{can_approve}", permissions=permissions, organizations=Organization.objects.all())
    )


def _draft() -> Outreach:
    return make_draft(draft_subject="Hello Pat")


def test_staff_without_approve_permission_gets_403_on_queue_and_draft() -> None:
    draft = _draft()
    client = _staff(can_approve=False)
    change_url = reverse("admin:outreach_draftforapproval_change", args=[draft.pk])
    assert client.get(reverse(QUEUE_URL)).status_code == 403
    assert client.get(change_url).status_code == 403
    response = client.post(change_url, {"draft_subject": "x", "draft_body": "y", "_approve": "1"})
    assert response.status_code == 403
    draft.refresh_from_db()
    assert draft.state == State.AWAITING_APPROVAL


def test_approver_sees_queue_and_edits_and_approves() -> None:
    # given a draft and a user with the approve permission
    draft = _draft()
    client = _staff(can_approve=True)
    assert "Hello Pat" in client.get(reverse(QUEUE_URL)).content.decode()
    # when they edit the body and approve
    change_url = reverse("admin:outreach_draftforapproval_change", args=[draft.pk])
    response = client.post(
        change_url, {"draft_subject": "Hello Pat", "draft_body": EDITED_BODY, "_approve": "1"}
    )
    # then the draft is approved with the edit, by that user, and the history says edited
    assert response.status_code == 302
    draft.refresh_from_db()
    assert (draft.state, draft.draft_body) == (State.APPROVED, EDITED_BODY)
    assert draft.approved_by is not None
    assert draft.approved_by.username == "staffTrue"
    assert OutreachEvent.objects.get(outreach=draft, to_state=State.APPROVED).note == "edited and approved"


def test_approver_rejects_from_the_form() -> None:
    draft = _draft()
    client = _staff(can_approve=True)
    change_url = reverse("admin:outreach_draftforapproval_change", args=[draft.pk])
    client.post(change_url, {"draft_subject": "Hello Pat", "draft_body": "Short note.", "_reject": "1"})
    draft.refresh_from_db()
    assert draft.state == State.REJECTED


def test_bulk_approve_action_skips_drafts_already_handled() -> None:
    drafts = [_draft() for _ in range(3)]
    already = make_outreach(state=State.REJECTED, draft_subject="s", draft_body="b")
    client = _staff(can_approve=True)
    ids = [d.pk for d in drafts] + [already.pk]
    client.post(reverse(QUEUE_URL), {"action": "approve_selected", "_selected_action": ids})
    states = sorted(o.state for o in Outreach.objects.filter(pk__in=ids))
    assert states == [State.APPROVED] * 3 + [State.REJECTED]


def test_outreach_list_shows_why_queued_work_waits() -> None:
    make_outreach(blocked_reason="daily limit 50 reached, resumes 09:00 Europe/Berlin")
    client = logged_in(make_user("root", superuser=True))
    page = client.get(reverse("admin:outreach_outreach_changelist")).content.decode()
    assert "daily limit 50 reached, resumes 09:00 Europe/Berlin" in page


def test_outreach_list_shows_why_an_approved_send_waits() -> None:
    reason = "sender domain example.com: 200/day reached (warm-up day 3), resumes 00:00 UTC"
    make_outreach(state=State.APPROVED, draft_subject="Hi", draft_body="Body", blocked_reason=reason)
    client = logged_in(make_user("root", superuser=True))
    page = client.get(reverse("admin:outreach_outreach_changelist")).content.decode()
    assert reason in page
