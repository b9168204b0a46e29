"""Operators' workflows in a real browser, as an operator does them: tick rows in the admin,
choose an action, answer its page, read what it did. Cancel, retry now, reassign, reject with a
reason, and pause and resume an owner (docs/operators.md, "Actions", "Pause and resume").

Debian's Chromium driven by Playwright (tests/e2e/conftest.py); screenshots in
artifacts/e2e/browser/. Who may not do these is tested with Django's test client
(tests/backoffice/test_admin_actions.py, tests/backoffice/test_admin_pauses.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import BrowserContext, Page, expect

from orchestrator.models import Pause
from outreach.models import Organization, Outreach, OutreachEvent, State
from tests.e2e.conftest import SHOTS
from tests.factories import make_draft, make_lead, make_org, make_outreach, make_owner, make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _operator(org: Organization, *codenames: str) -> User:
    return make_user("operator", permissions=codenames, organizations=[org])


def _log_in(page: Page, base_url: str, user: User) -> None:
    page.goto(f"{base_url}/admin/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", "pw")  # tests.factories.make_user's password
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(user.username)


def _choose_action(page: Page, list_url: str, ids: list[int], action: str) -> None:
    """On the list: tick the rows, choose the action in the drop-down, press Go."""
    page.goto(list_url)
    for pk in ids:
        page.check(f"input.action-select[value='{pk}']")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")


def _message(page: Page) -> Any:
    return page.locator(".messagelist")


def _shot(page: Page, name: str) -> None:
    page.screenshot(path=SHOTS / f"{name}.png", full_page=True)


def _state(outreach: Outreach) -> str:
    outreach.refresh_from_db()
    return outreach.state


@pytest.fixture
def page(browser: BrowserContext) -> Page:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return browser.new_page()


def test_operator_cancels_work_and_reads_what_was_skipped(page: Page, live_server: Any) -> None:
    # given queued work and a sent email of one owner
    org = make_org()
    owner = make_owner(organization=org)
    queued = make_outreach(lead=make_lead(owner=owner))
    sent = make_outreach(lead=make_lead(owner=owner), state=State.SENT)
    _log_in(page, live_server.url, _operator(org, "view_outreach", "cancel_outreach"))
    # when the operator selects both and cancels
    _choose_action(
        page, f"{live_server.url}/admin/outreach/outreach/", [queued.pk, sent.pk], "cancel_selected"
    )
    # then the queued one is cancelled and the page says why the other was not
    expect(_message(page)).to_contain_text(f"1 cancelled; 1 skipped: #{sent.pk} is already sent.")
    _shot(page, "operator-cancel")
    assert (_state(queued), _state(sent)) == (State.CANCELLED, State.SENT)


def test_operator_retries_backing_off_work_now(page: Page, live_server: Any) -> None:
    org = make_org()
    waiting = make_outreach(
        lead=make_lead(owner=make_owner(organization=org)),
        not_before=timezone.now() + timedelta(hours=3),
        attempts=1,
    )
    _log_in(page, live_server.url, _operator(org, "view_outreach", "retry_outreach"))
    _choose_action(page, f"{live_server.url}/admin/outreach/outreach/", [waiting.pk], "retry_now_selected")
    expect(_message(page)).to_contain_text("1 due now (the next dispatch cycle takes them).")
    _shot(page, "operator-retry-now")
    waiting.refresh_from_db()
    assert waiting.not_before <= timezone.now()
    assert (waiting.state, waiting.attempts) == (State.QUEUED, 1)


def test_operator_reassigns_work_to_another_owner_of_the_organization(page: Page, live_server: Any) -> None:
    # given Acme's owners Ann and Bob, and another organization's owner Zed
    org = make_org(name="Acme")
    ann, bob = make_owner(organization=org, name="Ann"), make_owner(organization=org, name="Bob")
    make_owner(organization=make_org(name="Other"), name="Zed")
    work = make_outreach(lead=make_lead(owner=ann))
    _log_in(page, live_server.url, _operator(org, "view_outreach", "reassign_outreach"))
    # when the operator chooses "Reassign" on Ann's work
    _choose_action(page, f"{live_server.url}/admin/outreach/outreach/", [work.pk], "reassign_selected")
    # then the page offers Acme's owners only
    options = page.locator("#action-form select[name=owner] option")
    expect(options).to_have_text(["---------", "Ann (AI agent)", "Bob (AI agent)"])
    _shot(page, "operator-reassign-form")
    # when they choose Bob and confirm
    page.select_option("#action-form select[name=owner]", label="Bob (AI agent)")
    page.click("#action-form input[name=apply]")
    # then the work is Bob's
    expect(_message(page)).to_contain_text("1 reassigned to Bob.")
    work.refresh_from_db()
    assert work.owner == bob


def test_reviewer_rejects_drafts_with_a_reason_and_the_dashboard_counts_it(
    page: Page, live_server: Any
) -> None:
    # given two drafts waiting in the approval queue
    org = make_org()
    drafts = [make_draft(lead=make_lead(owner=make_owner(organization=org))) for _ in range(2)]
    reviewer = _operator(org, "view_outreach", "approve_outreach", "reject_outreach", "view_queue_health")
    _log_in(page, live_server.url, reviewer)
    # when the reviewer selects both, chooses "Reject ... with a reason" and gives one
    queue = f"{live_server.url}/admin/outreach/draftforapproval/"
    _choose_action(page, queue, [d.pk for d in drafts], "reject_selected")
    page.fill("#action-form input[name=reason]", "Too pushy for a first email")
    _shot(page, "reviewer-reject-form")
    page.click("#action-form input[name=apply]")
    # then both are rejected with the reason, it is in their history, and the queue is empty
    expect(_message(page)).to_contain_text("2 rejected.")
    expect(page.locator("#result_list tbody tr")).to_have_count(0)
    assert {(_state(d), d.rejected_reason) for d in drafts} == {
        (State.REJECTED, "Too pushy for a first email")
    }
    history = OutreachEvent.objects.filter(outreach__in=drafts, note="rejected: Too pushy for a first email")
    assert history.count() == 2
    # and the queue-health dashboard counts the reason
    page.goto(f"{live_server.url}/admin/queue-health/")
    row = page.locator("#table-rejections tbody tr").first
    expect(row).to_contain_text("Too pushy for a first email")
    expect(row.locator("td.num")).to_have_text("2")
    _shot(page, "reviewer-reject-dashboard")


def test_operator_pauses_an_owner_sees_it_on_the_dashboard_and_resumes_it(
    page: Page, live_server: Any
) -> None:
    # given Acme's owner Ann and an operator who may pause and resume
    org = make_org(name="Acme")
    ann = make_owner(organization=org, name="Ann")
    codenames = ("view_owner", "view_pause", "add_pause", "change_pause", "view_queue_health")
    _log_in(page, live_server.url, _operator(org, *codenames))
    owners = f"{live_server.url}/admin/outreach/owner/"
    # when they choose "Pause selected" on Ann, give a reason and confirm
    _choose_action(page, owners, [ann.pk], "pause_selected")
    page.fill("#action-form input[name=reason]", "rewriting her templates")
    page.click("#action-form input[name=apply]")
    # then Ann is paused, by them, shown on the dashboard with who and why
    expect(_message(page)).to_contain_text("1 paused (owner Ann).")
    assert Pause.objects.filter(owner=ann, resumed_at=None, created_by__username="operator").count() == 1
    page.goto(f"{live_server.url}/admin/queue-health/")
    paused = page.locator("#table-pauses tbody tr").first
    for text in ("owner Ann", "operator", "rewriting her templates", "operator"):
        expect(paused).to_contain_text(text)
    _shot(page, "operator-pause-dashboard")
    # when they resume her from the Pauses list
    page.click("#link-pauses")
    stop = Pause.objects.get(owner=ann)
    page.check(f"input.action-select[value='{stop.pk}']")
    page.select_option("select[name=action]", "resume_selected")
    page.click("button[name=index]")
    # then the pause is lifted and the dashboard says nothing is paused
    expect(_message(page)).to_contain_text("1 pause(s) resumed")
    stop.refresh_from_db()
    assert stop.resumed_at is not None
    page.goto(f"{live_server.url}/admin/queue-health/")
    expect(page.locator("#table-pauses")).to_contain_text("Nothing is paused.")
    _shot(page, "operator-resume")
