"""Operators in a real browser (issue #19): upload a lead CSV and watch its batch load on real
workers; upload a bad one and read its problems with nothing loaded; export a filtered list as
CSV; set a draft expiry and see, after beat has run it, the expired draft with its reason.

Debian's Chromium driven by Playwright, as in test_browser_approval.py; screenshots in
artifacts/e2e/browser/.
"""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import BrowserContext, Page, expect

from config.queues import Queue
from devtools import processes
from devtools.processes import ProcessGroup
from outreach.models import AssignmentBatch, Lead, Organization, Outreach, State
from tests.e2e.conftest import SHOTS, wait_until
from tests.e2e.test_browser_approval import _log_in, _staff_user
from tests.factories import make_draft, make_lead, make_org, make_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

HEADER = "email,first_name,last_name,company,title,timezone,owner\n"


def _shot(page: Page, name: str) -> None:
    page.screenshot(path=SHOTS / f"operator-{name}.png", full_page=True)


def _operator(org: Organization, *codenames: str) -> User:
    user = _staff_user(f"op{org.pk}", codenames=list(codenames))
    org.members.add(user)
    return user


def _upload(page: Page, base_url: str, org: Organization, csv_file: Path) -> None:
    """As an operator does it: Assignment batches, "Upload leads CSV", the form."""
    page.goto(f"{base_url}/admin/")
    page.get_by_role("link", name="Assignment batches").first.click()
    page.click("#upload-leads-link")
    expect(page.locator("h1")).to_have_text("Upload leads CSV")
    page.select_option("select[name=organization]", label=org.name)
    page.set_input_files("input[name=file]", str(csv_file))
    page.click("input[name=_upload]")


def test_operator_uploads_a_good_csv_and_watches_the_batch_load(
    browser: BrowserContext, live_server: Any, stack: ProcessGroup, tmp_path: Path
) -> None:
    # given an organization with two owners, an operator allowed to upload, and the intake worker
    org = make_org(name="Acme")
    make_owner(organization=org, name="Ann")
    make_owner(organization=org, name="Bob")
    operator = _operator(org, "add_assignmentbatch")
    csv_file = tmp_path / "march-leads.csv"
    csv_file.write_text(
        HEADER
        + "pat@x.example,Pat,Lee,X Corp,CTO,Europe/Berlin,Ann\n"
        + "sam@y.example,Sam,Roe,Y Ltd,,America/New_York,Bob\n"
        + "kim@z.example,Kim,Poe,Z AG,CEO,UTC,Ann\n",
        encoding="utf-8",
    )
    stack.start("worker-orchestrator", processes.celery_worker(Queue.ORCHESTRATOR, concurrency=1))
    page = browser.new_page()
    _log_in(page, live_server.url, operator)

    # when they upload the file
    _upload(page, live_server.url, org, csv_file)

    # then they land on the batch's page, which reloads itself until the workers completed it
    batch = AssignmentBatch.objects.get()
    expect(page).to_have_url(re.compile(rf"/admin/outreach/assignmentbatch/{batch.pk}/change/$"))
    # (not the one-off "started" message: the page may have reloaded itself already)
    expect(page.locator("#content h2")).to_contain_text(f"assignment #{batch.pk} march-leads.csv")
    expect(page.locator(".field-status")).to_contain_text("Completed", timeout=45_000)
    expect(page.locator(".field-progress")).to_contain_text("3/3 leads (100%)")
    expect(page.locator(".field-leads_created")).to_contain_text("3")
    expect(page.locator(".field-outreach_created")).to_contain_text(str(Outreach.objects.count()))
    _shot(page, "upload-done")
    assert set(Lead.objects.filter(organization=org).values_list("email", flat=True)) == {
        "pat@x.example",
        "sam@y.example",
        "kim@z.example",
    }
    assert Outreach.objects.filter(kind=Outreach.Kind.INTRO, state=State.QUEUED).count() == 3


def test_operator_uploads_a_bad_csv_and_reads_every_problem_with_nothing_loaded(
    browser: BrowserContext, live_server: Any, tmp_path: Path
) -> None:
    # given an organization with one owner and an operator allowed to upload
    org = make_org(name="Acme")
    make_owner(organization=org, name="Ann")
    operator = _operator(org, "add_assignmentbatch")
    csv_file = tmp_path / "bad-leads.csv"
    csv_file.write_text(
        HEADER
        + "pat@x.example,Pat,Lee,X Corp,CTO,Europe/Berlin,Ann\n"
        + "not-an-email,Sam,Roe,Y Ltd,,UTC,Ann\n"
        + "kim@z.example,Kim,Poe,Z AG,CEO,Mars/Olympus,Zed\n",
        encoding="utf-8",
    )
    page = browser.new_page()
    _log_in(page, live_server.url, operator)

    # when they upload it
    _upload(page, live_server.url, org, csv_file)

    # then the page lists each problem by line and field, says nothing was loaded, and nothing was
    expect(page.locator("#upload-problems-summary")).to_contain_text(
        "3 problems on 2 lines: nothing was loaded. Fix the lines below"
    )
    rows = page.locator("#upload-problems tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("3")
    expect(rows.nth(0)).to_contain_text("email")
    expect(rows.nth(0)).to_contain_text("is not a valid email address")
    expect(rows.nth(1)).to_contain_text("timezone")
    expect(rows.nth(2)).to_contain_text("unknown owner 'Zed' (create it in the admin's Owners")
    _shot(page, "upload-problems")
    assert (Lead.objects.count(), AssignmentBatch.objects.count(), Outreach.objects.count()) == (0, 0, 0)


def test_operator_exports_the_filtered_lead_list_as_csv(browser: BrowserContext, live_server: Any) -> None:
    # given active and converted leads, one with a hostile company name, and a viewer of leads
    org = make_org(name="Acme")
    owner = make_owner(organization=org, name="Ann")
    make_lead(owner=owner, email="active@x.example")
    make_lead(owner=owner, email="won@x.example", status=Lead.Status.CONVERTED, company="=HYPERLINK(1)")
    make_lead(owner=owner, email="won2@x.example", status=Lead.Status.CONVERTED)
    operator = _operator(org, "view_lead")
    page = browser.new_page()
    _log_in(page, live_server.url, operator)

    # when they filter the lead list to converted leads and click "Export CSV"
    page.goto(f"{live_server.url}/admin/outreach/lead/")
    page.locator("#changelist-filter").get_by_role("link", name="Converted").click()
    expect(page.locator("#result_list tbody tr")).to_have_count(2)
    _shot(page, "export-filtered")
    with page.expect_download() as download_info:
        page.click(".export-csv-link")
    download = download_info.value

    # then the file holds exactly the two converted leads, the formula neutralised
    text = Path(download.path()).read_text(encoding="utf-8")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert sorted(row["email"] for row in rows) == ["won2@x.example", "won@x.example"]
    assert {row["company"] for row in rows} == {"'=HYPERLINK(1)", "Acme"}
    assert re.fullmatch(r"lead-\d{8}-\d{6}\.csv", download.suggested_filename)


def test_operator_sets_a_draft_expiry_and_sees_the_stale_draft_expire(
    browser: BrowserContext, live_server: Any, stack: ProcessGroup
) -> None:
    # given a draft waiting 5 days for approval, and an operator who may change the organization's
    # settings, approve drafts and read outreach
    org = make_org(name="Acme")
    owner = make_owner(organization=org, name="Ann", review_required=True)
    draft = make_draft(
        lead=make_lead(owner=owner, email="stale@x.example"),
        state_changed_at=timezone.now() - timedelta(days=5),
    )
    operator = _operator(
        org,
        "change_organization",
        "view_organization",
        "change_organization_settings",
        "approve_outreach",
        "view_outreach",
    )
    page = browser.new_page()
    _log_in(page, live_server.url, operator)

    # when they set the organization's draft expiry to 3 days
    page.goto(f"{live_server.url}/admin/outreach/organization/{org.pk}/change/")
    page.fill("input[name=draft_expiry_days]", "3")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    # and beat runs the expiry (every second here) on the orchestrator worker
    stack.env["DRAFT_EXPIRY_INTERVAL_S"] = "1"
    stack.start("worker-orchestrator", processes.celery_worker(Queue.ORCHESTRATOR, concurrency=1))
    stack.start("beat", processes.celery_beat())
    wait_until(
        lambda: Outreach.objects.get(pk=draft.pk).state == State.CANCELLED,
        timeout_s=45,
        what="the draft to expire",
        group=stack,
    )

    # then the approval queue no longer offers it, and the outreach list shows it cancelled,
    # with the reason in its history
    page.goto(f"{live_server.url}/admin/outreach/draftforapproval/")
    expect(page.locator("#changelist")).to_contain_text("0 approval queue")
    expect(page.locator("#changelist")).not_to_contain_text("stale@x.example")
    page.goto(f"{live_server.url}/admin/outreach/outreach/?state__exact=cancelled")
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("stale@x.example")
    rows.first.locator("th a").click()
    expect(page.locator("#events-group")).to_contain_text(
        "expired: waited more than 3 day(s) for approval (organization setting)"
    )
    _shot(page, "expired-draft")
