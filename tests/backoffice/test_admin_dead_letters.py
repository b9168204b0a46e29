"""The dead-letter admin (backoffice/admin/organizations.py): operators read, approvers replay, cancel or
escalate, each only in their organizations."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from orchestrator.failures.dead_letters import dead_letter, dead_letter_replay
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Organization, Outreach, State
from tests.factories import logged_in, make_outreach, make_user

pytestmark = pytest.mark.django_db

LIST_URL = "admin:orchestrator_deadletter_changelist"


def _client(user: User) -> Client:
    """Logged in as `user`, a member of every organization so far (lists are scoped to them)."""
    user.organizations.add(*Organization.objects.all())
    return logged_in(user)


def _permission(name: str) -> Permission:
    """The permission called "<app_label>.<codename>", as has_perm names it."""
    app_label, codename = name.split(".")
    return Permission.objects.get(content_type__app_label=app_label, codename=codename)


def _staff(*, can_approve: bool, name: str = "") -> User:
    user = User.objects.create_user(name or f"staff{can_approve}", password="pw", is_staff=True)
    user.user_permissions.add(_permission("orchestrator.view_deadletter"))
    if can_approve:
        user.user_permissions.add(_permission("outreach.approve_outreach"))
    return user


def _letter(*, draft: bool = False) -> DeadLetter:
    state = State.SENDING if draft else State.GENERATING
    outreach = make_outreach(state=state, draft_body="Note." if draft else "")
    return dead_letter(
        outreach=outreach,
        from_=state,
        failure_class=ErrorClass.EXHAUSTED,
        reason="HTTP 503 x3",
        job_type="send" if draft else "generation",
    )


def _act(client: Client, action: str, letters: list[DeadLetter]) -> str:
    response = client.post(
        reverse(LIST_URL), {"action": action, "_selected_action": [dl.pk for dl in letters]}, follow=True
    )
    assert response.status_code == 200
    return response.content.decode()


def test_approver_replays_selected_and_is_told_counts_and_skips() -> None:
    # given two open letters and one already replayed
    generation, send, done = _letter(), _letter(draft=True), _letter()
    dead_letter_replay(dead_letter=done)
    user = _staff(can_approve=True)
    # when an approver runs "Replay" on all three
    page = _act(_client(user), "replay_selected", [generation, send, done])
    # then two moved (no draft -> queued, draft -> approved) and the skip is explained
    assert "2 dead letter(s) replayed; 1 skipped" in page
    assert f"#{done.pk}: it is replayed" in page
    states = {dl.pk: Outreach.objects.get(pk=dl.outreach_id).state for dl in (generation, send)}
    assert states == {generation.pk: State.QUEUED, send.pk: State.APPROVED}
    assert DeadLetter.objects.get(pk=generation.pk).resolved_by == user


def test_approver_cancels_selected() -> None:
    letter = _letter()
    page = _act(_client(_staff(can_approve=True)), "cancel_selected", [letter])
    assert "1 dead letter(s) cancelled; 0 skipped." in page
    assert Outreach.objects.get(pk=letter.outreach_id).state == State.CANCELLED


def test_approver_escalates_selected_and_outreach_stays_dead() -> None:
    letter = _letter()
    page = _act(_client(_staff(can_approve=True)), "escalate_selected", [letter])
    assert "1 dead letter(s) escalated; 0 skipped." in page
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.ESCALATED
    assert "from the admin by stafftrue" in letter.reason.lower()
    assert Outreach.objects.get(pk=letter.outreach_id).state == State.DEAD


def test_superuser_may_run_the_actions() -> None:
    letter = _letter()
    root = make_user("root", superuser=True)
    assert "1 dead letter(s) replayed" in _act(_client(root), "replay_selected", [letter])


def test_staff_without_approve_permission_sees_no_actions_and_gets_403_on_post() -> None:
    # given a viewer without the approve permission (the model is the orchestrator app's)
    letter = _letter()
    viewer = _staff(can_approve=False)
    assert viewer.has_perm("orchestrator.view_deadletter")
    client = _client(viewer)
    # when they open the list / then it shows, without the actions
    page = client.get(reverse(LIST_URL)).content.decode()
    assert letter.suggested_action in page
    assert "replay_selected" not in page
    # when they forge the action POST / then 403 and nothing changed
    response = client.post(reverse(LIST_URL), {"action": "replay_selected", "_selected_action": [letter.pk]})
    assert response.status_code == 403
    assert DeadLetter.objects.get(pk=letter.pk).status == DeadLetter.Status.OPEN
    assert Outreach.objects.get(pk=letter.outreach_id).state == State.DEAD


def test_approver_without_dead_letter_view_permission_still_reaches_the_list() -> None:
    user = User.objects.create_user("approver", password="pw", is_staff=True)
    user.user_permissions.add(_permission("outreach.approve_outreach"))
    assert _client(user).get(reverse(LIST_URL)).status_code == 200


def test_list_shows_class_job_type_entities_suggestion_and_replay_outcome() -> None:
    letter = _letter(draft=True)
    page = _client(_staff(can_approve=True)).get(reverse(LIST_URL)).content.decode()
    for text in (
        letter.suggested_action,
        "Retries exhausted",
        "send",
        f"org {letter.organization_id_ref} / owner {letter.owner_id_ref} / lead {letter.lead_id_ref}",
        "Replay succeeded",
        "replay_selected",
    ):
        assert text in page


def test_detail_page_shows_retry_history_as_pretty_json() -> None:
    letter = _letter()
    url = reverse("admin:orchestrator_deadletter_change", args=[letter.pk])
    page = _client(_staff(can_approve=True)).get(url).content.decode()
    assert "<pre>[\n  {\n" in page
    assert "&quot;error_class&quot;: &quot;exhausted&quot;" in page
    assert "&quot;idempotency_key&quot;" in page


def test_forged_replay_cannot_reach_another_organizations_dead_letter() -> None:
    # given a dead letter in each of two organizations, and an approver who is a member of the first
    mine, other = _letter(), _letter()
    user = _staff(can_approve=True)
    user.organizations.add(mine.outreach.owner.organization)
    client = Client()
    client.force_login(user)
    # when they post "Replay" naming both
    client.post(reverse(LIST_URL), {"action": "replay_selected", "_selected_action": [mine.pk, other.pk]})
    # then only their organization's letter is replayed
    mine.refresh_from_db()
    other.refresh_from_db()
    assert (mine.status, other.status) == (DeadLetter.Status.REPLAYED, DeadLetter.Status.OPEN)
