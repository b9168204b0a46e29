"""`PreparedGet` returns what the ORM's get returns, related rows loaded, with one statement."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext

from outreach.models import Mailbox, Outreach, PreparedGet
from tests.factories import make_lead, make_outreach

pytestmark = pytest.mark.django_db

LOAD = PreparedGet(
    lambda: Outreach.objects.select_related("lead__organization", "owner__organization", "mailbox")
)


def _fields(obj: Model) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def test_it_loads_the_row_and_its_related_rows_as_the_orm_does_in_one_statement() -> None:
    # given an outreach with a draft, a JSON context, times, a mailbox, and one without a mailbox
    lead = make_lead()
    box = Mailbox.objects.create(organization=lead.organization, address="anna@mail.example")
    with_box = make_outreach(
        lead=lead,
        context={"summary": "ünïcode", "facts": [1, 2]},
        draft_subject="Hi",
        draft_body="Body",
        mailbox=box,
    )
    without = make_outreach()
    for outreach in (with_box, without, with_box):  # the second load of one runs the compiled SQL again
        expected = Outreach.objects.select_related(
            "lead__organization", "owner__organization", "mailbox"
        ).get(pk=outreach.pk)
        # when it is loaded
        with CaptureQueriesContext(connection) as queries:
            loaded = LOAD.get(outreach.pk)
            related = (
                loaded.lead,
                loaded.lead.organization,
                loaded.owner,
                loaded.owner.organization,
                loaded.mailbox,
            )
        # then it is the same row with the same related rows, all from one statement
        assert len(queries) == 1
        assert _fields(loaded) == _fields(expected)
        assert [_fields(r) if r else None for r in related] == [
            _fields(r) if r else None
            for r in (
                expected.lead,
                expected.lead.organization,
                expected.owner,
                expected.owner.organization,
                expected.mailbox,
            )
        ]
        assert not loaded._state.adding
        assert loaded._state.db == "default"


def test_a_missing_row_raises_the_models_does_not_exist() -> None:
    with pytest.raises(Outreach.DoesNotExist):
        LOAD.get(2**40)


def test_a_query_that_does_not_take_the_primary_key_alone_is_refused() -> None:
    with pytest.raises(ValueError, match="primary key"):
        PreparedGet(lambda: Outreach.objects.filter(pk=-987_654_321)).get(1)
