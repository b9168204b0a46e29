"""`field__any=[...]` (outreach.models.lookups): the rows `__in` finds, in one statement whose
text and parameter count do not grow with the list."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from outreach.models import Outreach, State, int_array, text_array
from tests.factories import make_outreach

pytestmark = pytest.mark.django_db


def test_any_finds_what_in_finds_with_one_parameter_whatever_the_list() -> None:
    # given three rows, two of them queued
    rows = [make_outreach(state=s) for s in (State.QUEUED, State.QUEUED, State.CANCELLED)]
    ids = [r.pk for r in rows]
    # when filtered by a short list, a long one (ids that match nothing among them), an empty
    # one, on the primary key and on a foreign key
    short = Outreach.objects.filter(id__any=ids, state=State.QUEUED)
    long = Outreach.objects.filter(id__any=[*ids, *range(10**6, 10**6 + 5000)], state=State.QUEUED)
    # then the same rows as __in
    expected = set(Outreach.objects.filter(id__in=ids, state=State.QUEUED).values_list("id", flat=True))
    assert set(short.values_list("id", flat=True)) == expected == set(long.values_list("id", flat=True))
    assert list(Outreach.objects.filter(id__any=[])) == []
    by_owner = Outreach.objects.filter(owner_id__any={rows[0].owner_id})
    assert set(by_owner.values_list("id", flat=True)) == {rows[0].pk}
    # and one parameter in one statement text, however many ids
    sql_short, params_short = short.values_list("id").query.sql_with_params()
    sql_long, params_long = long.values_list("id").query.sql_with_params()
    assert sql_short == sql_long
    assert len(params_short) == len(params_long) == 2  # the id array and the state
    with CaptureQueriesContext(connection) as queries:
        assert Outreach.objects.filter(id__any=ids).update(blocked_reason="x") == 3
    assert "= ANY(" in queries.captured_queries[0]["sql"]


def test_an_int_array_is_read_back_as_the_numbers_it_was_made_of() -> None:
    # given whole numbers, negative and past 32 bits, and an empty list
    values = [3, -7, 2**40, 0]
    # then PostgreSQL reads the literal back as them (the demo's SQLite never gets one)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT %s::bigint[], %s::bigint[]", [int_array(values), int_array([])])
            assert cursor.fetchone() == (values, [])
    # and anything but whole numbers is refused before it reaches the text
    hostile: list[Any] = ["1}, {2"]
    with pytest.raises(ValueError, match="invalid literal for int"):
        int_array(hostile)


HOSTILE_TEXT = [
    "plain",
    "",
    'a "quoted" word',
    "back\\slash\\",
    "comma, {brace}, and } brace",
    "NULL",
    "'single' quotes; DROP TABLE outreach_outreach; --",
    "tab\tnewline\n and unicode é ✓",
]


def test_a_text_array_is_read_back_as_the_strings_it_was_made_of() -> None:
    # given strings holding every character the array syntax or SQL gives a meaning to
    # then PostgreSQL reads the literal back as them, one element each, as written
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT %s::text[], %s::text[], %s::varchar(200)[]",
                [text_array(HOSTILE_TEXT), text_array([]), text_array(HOSTILE_TEXT)],
            )
            assert cursor.fetchone() == (HOSTILE_TEXT, [], HOSTILE_TEXT)
    # and what text cannot hold, or what is not a string, is refused before it reaches SQL
    with pytest.raises(ValueError, match="NUL"):
        text_array(["a\x00b"])
    not_text: list[Any] = ["a", 1]
    with pytest.raises(TypeError, match="strings only"):
        text_array(not_text)
