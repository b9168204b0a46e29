"""`Prepared` returns what the ORM's queryset returns, related rows loaded, with one statement."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext

from outreach.models import Mailbox, Outreach, Prepared, State
from tests.factories import make_lead, make_outreach

pytestmark = pytest.mark.django_db

LOAD = Prepared(
    lambda pk: Outreach.objects.select_related("lead__organization", "owner__organization", "mailbox").filter(
        pk=pk
    )
)
EARLIER = Prepared(
    lambda lead, outreach: (
        Outreach.objects.filter(lead_id=lead, state=State.SENT)
        .exclude(id=outreach)
        .order_by("-id")
        .only("draft_subject", "context")[:2]
    )
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
            loaded = LOAD.get(pk=outreach.pk)
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
        LOAD.get(pk=2**40)


def test_each_parameter_goes_where_it_was_used_and_every_row_comes_back_in_order() -> None:
    # given a lead with three sent emails and a queued one, and another lead's sent email
    lead = make_lead()
    sent = [
        make_outreach(lead=lead, state=State.SENT, context={"n": n}, draft_subject=f"s{n}") for n in range(3)
    ]
    make_outreach(lead=lead, state=State.QUEUED)
    make_outreach(state=State.SENT)
    for excluding in (sent[2], sent[0]):  # the second run is the compiled SQL with other values
        expected = list(
            Outreach.objects.filter(lead_id=lead.pk, state=State.SENT)
            .exclude(id=excluding.pk)
            .order_by("-id")
            .only("draft_subject", "context")[:2]
        )
        # when the prepared query runs
        with CaptureQueriesContext(connection) as queries:
            found = EARLIER.all(lead=lead.pk, outreach=excluding.pk)
        # then it is the queryset's rows, in its order, the deferred fields deferred, in one statement
        assert len(queries) == 1
        assert [(o.pk, o.draft_subject, o.context) for o in found] == [
            (o.pk, o.draft_subject, o.context) for o in expected
        ]
        assert all(
            o.get_deferred_fields() == e.get_deferred_fields() for o, e in zip(found, expected, strict=True)
        )
    assert EARLIER.all(lead=2**40, outreach=0) == []


def test_a_parameter_not_used_once_as_a_filter_value_is_refused() -> None:
    unused = Prepared(lambda pk, other: Outreach.objects.filter(pk=pk))
    with pytest.raises(ValueError, match="'other' must be used once"):
        unused.get(pk=1, other=2)
    twice = Prepared(lambda pk: Outreach.objects.filter(pk=pk) | Outreach.objects.filter(lead_id=pk))
    with pytest.raises(ValueError, match="'pk' must be used once"):
        twice.all(pk=1)
