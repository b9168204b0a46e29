"""A lead's email is its identity within an organization: stored normalised (trimmed,
lower-cased), unique whatever its case, and found by any spelling of the address."""

from __future__ import annotations

import importlib
import pkgutil
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import IntegrityError, connection, transaction
from django.test import Client

import outreach.migrations
from nurture.intake.replies import signature_header
from outreach.models import Lead, Outreach
from tests.factories import make_lead, make_org, make_owner

pytestmark = pytest.mark.django_db

# Found by name: migration numbers change when branches merge.
_migration = importlib.import_module(
    next(
        f"outreach.migrations.{m.name}"
        for m in pkgutil.iter_modules(outreach.migrations.__path__)
        if m.name.endswith("_lead_email_normalised")
    )
)


def test_email_is_stored_trimmed_and_lower_cased() -> None:
    lead = make_lead(email="  Pat.Jones@Acme.EXAMPLE ")

    lead.refresh_from_db()
    assert lead.email == "pat.jones@acme.example"


def test_same_address_in_another_case_is_the_same_lead() -> None:
    # given a lead in an organization
    lead = make_lead(email="pat@acme.example")
    # when another row with the address in capitals is inserted in that organization
    with pytest.raises(IntegrityError), transaction.atomic():
        make_lead(owner=lead.owner, email="PAT@Acme.example")
    # then the database refused it; another organization may still have that address
    make_lead(email="PAT@Acme.example")


def test_lookups_by_any_spelling_find_the_lead() -> None:
    lead = make_lead(email="pat@acme.example")

    assert Lead.objects.get(email=" PAT@ACME.example") == lead
    assert list(Lead.objects.filter(email__in=["Pat@Acme.Example"])) == [lead]


def test_database_refuses_a_raw_insert_that_is_not_normalised() -> None:
    # bench and demo code insert leads with raw SQL: the constraint, not Python, is the guarantee
    owner = make_owner()
    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO outreach_lead (organization_id, owner_id, email, first_name, last_name, company,"
            " title, timezone, status, created_at) VALUES (%s, %s, 'Pat@Acme.example', '', '', '', '',"
            " 'UTC', 'active', now())",
            [owner.organization_id, owner.pk],
        )


def test_webhook_finds_a_lead_whatever_case_either_side_used(client: Client, settings: Any) -> None:
    # given a lead typed into the admin with capitals, and a reply whose address is lower-case
    settings.WEBHOOK_SECRET = "s3cret"
    lead = make_lead(email="Pat.Jones@Acme.example")
    body = b'{"lead_email": " pat.jones@acme.EXAMPLE", "message_id": "<m1@x>", "subject": "Re: hi", "body": "yes"}'
    # when the reply arrives
    signature = signature_header(body=body, secret="s3cret", timestamp=int(time.time()))
    response = client.post(
        "/hooks/replies/", data=body, content_type="application/json", headers={"X-Signature": signature}
    )
    # then it is the lead's reply
    assert response.status_code == 202, response.content
    assert Outreach.objects.get(kind=Outreach.Kind.REPLY).lead_id == lead.pk


def test_csv_intake_recognises_an_existing_lead_in_another_case(tmp_path: Path) -> None:
    # given a lead typed into the admin with capitals
    owner = make_owner(organization=make_org(name="Default"), name="Ann")
    lead = make_lead(owner=owner, email="Pat@Acme.example")
    path = tmp_path / "leads.csv"
    path.write_text(
        "email,first_name,last_name,company,title,timezone,owner\npat@ACME.example,Pat,,,,UTC,Ann\n",
        encoding="utf-8",
    )
    # when a file names the same address in another case
    call_command("assign_leads", str(path), "--no-progress", stdout=StringIO(), stderr=StringIO())
    # then no second lead was created
    assert list(Lead.objects.values_list("id", flat=True)) == [lead.pk]


def _without_identity_constraints() -> None:
    # The state before the migration: rows differing only in case could be stored.
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE outreach_lead DROP CONSTRAINT lead_email_normalised")
        cursor.execute("ALTER TABLE outreach_lead DROP CONSTRAINT lead_unique_email_per_org")


def _raw_lead(owner_id: int, organization_id: int, email: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO outreach_lead (organization_id, owner_id, email, first_name, last_name, company,"
            " title, timezone, status, created_at) VALUES (%s, %s, %s, '', '', '', '', 'UTC', 'active', now())",
            [organization_id, owner_id, email],
        )


def test_migration_normalises_existing_addresses() -> None:
    # given rows written before the constraint, one in capitals with spaces
    owner = make_owner()
    _without_identity_constraints()
    _raw_lead(owner.pk, owner.organization_id, " Pat@Acme.example ")
    # when the migration's data step runs
    _migration.lead_emails_normalise(apps, None)
    # then the address is normalised
    with connection.cursor() as cursor:
        cursor.execute("SELECT email FROM outreach_lead")
        assert cursor.fetchall() == [("pat@acme.example",)]


def test_migration_refuses_duplicates_and_names_them() -> None:
    # given two rows of one organization that differ only in case
    owner = make_owner()
    _without_identity_constraints()
    _raw_lead(owner.pk, owner.organization_id, "Pat@Acme.example")
    _raw_lead(owner.pk, owner.organization_id, "pat@acme.example")
    # when the migration's data step runs, then it stops and says which leads to resolve
    with pytest.raises(RuntimeError) as info:
        _migration.lead_emails_normalise(apps, None)
    message = str(info.value)
    assert "pat@acme.example" in message
    assert f"organization {owner.organization_id}" in message
    assert "lead ids" in message
