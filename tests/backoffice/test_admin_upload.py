"""Uploading a lead CSV in the admin (nurture.intake.upload behind AssignmentBatchAdmin's upload
page): the command's checks, problems listed by line and field with nothing loaded, a capped
list for huge files, the batch's page as the progress report, and only into the uploader's
organizations with owners of that organization."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.template.defaultfilters import filesizeformat
from django.test import Client
from django.urls import reverse

from backoffice.admin.uploads import UPLOAD_ERRORS_SHOWN
from nurture.intake.assignment import assignment_chunk_process
from outreach.models import AssignmentBatch, AssignmentItem, Lead, Organization, Outreach
from tests.factories import logged_in, make_org, make_owner, make_user

pytestmark = pytest.mark.django_db

UPLOAD_URL = reverse("admin:outreach_assignmentbatch_upload")
HEADER = "email,first_name,last_name,company,title,timezone,owner\n"
UPLOADER_PERMISSIONS = ["add_assignmentbatch"]


def _upload(client: Client, org: Organization, body: str, *, name: str = "leads.csv") -> Any:
    file = SimpleUploadedFile(name, (HEADER + body).encode(), content_type="text/csv")
    return client.post(UPLOAD_URL, {"organization": org.pk, "file": file})


def _uploader(*orgs: Organization) -> Client:
    return logged_in(make_user(permissions=UPLOADER_PERMISSIONS, organizations=orgs))


def _nothing_loaded() -> None:
    assert (Lead.objects.count(), Outreach.objects.count(), AssignmentBatch.objects.count()) == (0, 0, 0)


def test_a_good_file_starts_a_batch_and_redirects_to_its_progress_page() -> None:
    # given an organization with an owner and an uploader of it
    org = make_org(name="Acme")
    make_owner(organization=org, name="Ann")
    client = _uploader(org)
    # when they upload two good rows
    body = "pat@x.example,Pat,Lee,X,CTO,Europe/Berlin,Ann\nsam@y.example,Sam,Roe,Y,,UTC,Ann\n"
    response = _upload(client, org, body)
    # then a batch of two pending children exists and the browser goes to its page
    batch = AssignmentBatch.objects.get()
    assert (batch.organization_id, batch.children_total, batch.file_name) == (org.pk, 2, "leads.csv")
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:outreach_assignmentbatch_change", args=[batch.pk])
    # and when the workers' chunk runs, that page shows the batch complete with its counts
    item_ids = list(AssignmentItem.objects.values_list("id", flat=True))
    assignment_chunk_process(batch_id=batch.pk, first_id=min(item_ids), last_id=max(item_ids))
    page = client.get(response["Location"]).content.decode()
    assert f"Assignment #{batch.pk} started: 2 lead(s) of Acme are being loaded" in page
    assert "2/2 leads (100%)" in page
    assert "Completed" in page
    assert Lead.objects.filter(organization=org).count() == 2


def test_the_same_file_again_creates_nothing_new() -> None:
    # given a file uploaded and loaded
    org = make_org(name="Acme")
    make_owner(organization=org, name="Ann")
    client, body = _uploader(org), "pat@x.example,Pat,Lee,X,CTO,UTC,Ann\n"
    _upload(client, org, body)
    batch = AssignmentBatch.objects.get()
    item = AssignmentItem.objects.get()
    assignment_chunk_process(batch_id=batch.pk, first_id=item.pk, last_id=item.pk)
    # when it is uploaded again
    response = _upload(client, org, body)
    # then the page says nothing is new, and no second batch or outreach was made
    assert "Nothing new: every lead of the file is already assigned in Acme" in response.content.decode()
    assert AssignmentBatch.objects.count() == 1
    batch.refresh_from_db()
    assert Outreach.objects.count() == batch.outreach_created > 0


def test_a_bad_file_lists_every_problem_by_line_and_field_and_loads_nothing() -> None:
    # given an uploader and an owner
    org = make_org()
    make_owner(organization=org, name="Ann")
    # when a file with a bad email on line 2 and an unknown zone on line 3 is uploaded
    body = "not-an-email,Pat,Lee,X,CTO,UTC,Ann\nsam@y.example,Sam,Roe,Y,,Europe/Berln,Ann\n"
    response = _upload(_uploader(org), org, body)
    # then the page lists both problems with what to do, and nothing was loaded
    page = response.content.decode()
    assert response.status_code == 200
    assert "2 problems on 2 lines: nothing was loaded" in page
    assert [(p.line, p.field) for p in response.context["problems"]] == [(2, "email"), (3, "timezone")]
    assert "unknown time zone &#x27;Europe/Berln&#x27; (use an IANA name such as Europe/Berlin)" in page
    _nothing_loaded()


def test_a_huge_bad_file_shows_only_the_first_problems_and_counts_the_rest() -> None:
    # given a file of 1,000 rows, each with an empty time zone
    org = make_org()
    make_owner(organization=org, name="Ann")
    body = "".join(f"lead{i}@x.example,Pat,Lee,X,CTO,,Ann\n" for i in range(1000))
    # when it is uploaded
    response = _upload(_uploader(org), org, body)
    # then the first UPLOAD_ERRORS_SHOWN are listed and the rest counted
    assert len(response.context["problems"]) == UPLOAD_ERRORS_SHOWN
    assert f"and {1000 - UPLOAD_ERRORS_SHOWN} more problems not shown" in response.content.decode()
    _nothing_loaded()


def test_a_file_over_the_size_limit_is_refused_before_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # given an upload limit of 1 kB and a 2 kB file of good rows
    monkeypatch.setattr("backoffice.admin.uploads.UPLOAD_MAX_BYTES", 1000)
    org = make_org()
    make_owner(organization=org, name="Ann")
    body = "".join(f"lead{i}@x.example,Pat,Lee,X,CTO,UTC,Ann\n" for i in range(50))
    # when it is uploaded
    response = _upload(_uploader(org), org, body)
    # then the file field says why and what to do, and nothing is loaded
    assert response.context["form"].errors["file"] == [
        f"The file is {filesizeformat(len(HEADER) + len(body))}; an upload takes at most 1000\xa0bytes. "
        "Split it into smaller files, or load it with assign_leads."
    ]
    _nothing_loaded()


def test_an_owner_of_another_organization_is_unknown_in_the_chosen_one() -> None:
    # given owner "Bob" only in organization B, and an uploader of A and B
    org_a, org_b = make_org(name="A"), make_org(name="B")
    make_owner(organization=org_a, name="Ann")
    make_owner(organization=org_b, name="Bob")
    # when they upload into A a row naming Bob
    response = _upload(_uploader(org_a, org_b), org_a, "pat@x.example,Pat,Lee,X,CTO,UTC,Bob\n")
    # then the row is refused and nothing is loaded
    assert [(p.line, p.field) for p in response.context["problems"]] == [(2, "owner")]
    _nothing_loaded()


def test_a_member_of_another_organization_cannot_upload_into_it() -> None:
    # given organization A with an owner, and an uploader who belongs to B only
    org_a, org_b = make_org(name="A"), make_org(name="B")
    make_owner(organization=org_a, name="Ann")
    client = _uploader(org_b)
    # when they open the upload page, then post a file naming A
    choices = client.get(UPLOAD_URL).context["form"].fields["organization"].queryset
    response = _upload(client, org_a, "pat@x.example,Pat,Lee,X,CTO,UTC,Ann\n")
    # then only B is offered, the forged choice is refused, and nothing is loaded
    assert list(choices) == [org_b]
    assert "organization" in response.context["form"].errors
    _nothing_loaded()


def test_upload_needs_the_permission() -> None:
    # given staff of the organization without outreach.add_assignmentbatch
    org = make_org()
    make_owner(organization=org, name="Ann")
    client = logged_in(make_user(permissions=["view_assignmentbatch"], organizations=[org]))
    # when they open or post the upload page
    get, post = client.get(UPLOAD_URL), _upload(client, org, "pat@x.example,Pat,Lee,X,CTO,UTC,Ann\n")
    # then both are refused, and the changelist offers no upload button
    assert (get.status_code, post.status_code) == (403, 403)
    assert (
        "Upload leads CSV"
        not in client.get(reverse("admin:outreach_assignmentbatch_changelist")).content.decode()
    )
    _nothing_loaded()


def test_a_superuser_may_upload_into_any_organization() -> None:
    # given two organizations and a superuser in neither
    org_a, org_b = make_org(name="A"), make_org(name="B")
    make_owner(organization=org_b, name="Bob")
    client = logged_in(make_user(superuser=True))
    # when they upload into B
    choices = client.get(UPLOAD_URL).context["form"].fields["organization"].queryset
    response = _upload(client, org_b, "pat@x.example,Pat,Lee,X,CTO,UTC,Bob\n")
    # then every organization was offered and the batch is B's
    assert set(choices) == {org_a, org_b}
    assert response.status_code == 302
    assert AssignmentBatch.objects.get().organization_id == org_b.pk
