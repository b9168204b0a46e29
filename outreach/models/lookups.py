"""`field__any=[...]`: membership in a list sent as one array parameter.

`id__in=ids` writes one placeholder per id, and psycopg 3 splits and binds the statement's
placeholders in Python: at a dispatch cycle's hundreds to thousands of ids that cost tens of
milliseconds a statement (bench/dispatch.py, profiled). `id__any=ids` is `"id" = ANY(%s)` on
PostgreSQL, one parameter whatever the number of ids, and the statement's text is the same
for any list (one plan, one shape in tests/orchestrator/dispatch/test_cycle_queries.py).
SQLite (the demo) has no arrays: there it is `IN`, as `__in` writes it.

The array goes as its text (`int_array`), cast in the statement: psycopg's list dumper checks
every element's type in Python, and a cycle at 10,000 owners sends a few dozen such lists
(bench/dispatch.py, profiled: 130 ms of a 2 s cycle). Lists of strings likewise
(`text_array`): Django's psycopg cursors bind on the client, where the list dumper quotes each
element in Python, 1.7 us a string; a claim of 500 picks sends four such lists (the counters'
series, the rows' reservations and routes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db.models import ForeignKey, IntegerField, Lookup
from django.db.models.lookups import In


@ForeignKey.register_lookup
@IntegerField.register_lookup
class AnyOf(Lookup):
    lookup_name = "any"
    prepare_rhs = False

    def get_db_prep_lookup(self, value: Any, connection: Any) -> tuple[str, list[Any]]:
        return "%s::bigint[]", [int_array(value)]

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, list[Any]]:
        if connection.vendor != "postgresql":
            sql, params = In(self.lhs, list(self.rhs)).as_sql(compiler, connection)
            return sql, list(params)
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} = ANY({rhs})", [*lhs_params, *rhs_params]


def any_of(column: str, ids: Sequence[int], *, vendor: str) -> tuple[str, list[Any]]:
    """`column` among `ids` in a statement written by hand, as `AnyOf` writes `__any`: one
    array parameter on PostgreSQL, an IN list elsewhere (SQLite, the demo: no arrays)."""
    if vendor == "postgresql":
        return f"{column} = ANY(%s::bigint[])", [int_array(ids)]
    return f"{column} IN ({', '.join(['%s'] * len(ids))})", list(ids)


def int_array(values: Iterable[int]) -> str:
    """A PostgreSQL array literal of whole numbers, "{1,2,3}", for a parameter cast in the
    statement (`%s::bigint[]`, `%s::int[]`). Each value goes through `int()`: nothing but
    digits and signs reaches the text."""
    return "{" + ",".join(map(str, map(int, values))) + "}"


def text_array(values: Iterable[str]) -> str:
    """A PostgreSQL array literal of strings, '{"a","b \\"c\\""}', for a parameter cast in the
    statement (`%s::text[]`). Every element is double-quoted with its backslashes and double
    quotes escaped, the array syntax's only escapes inside quotes: whatever a string holds
    (commas, braces, quotes, NULL spelled out) it stays one element, as written. The literal
    itself is then one string parameter, quoted by libpq. A string with a NUL is refused, as
    PostgreSQL's text refuses it."""
    items = list(values)
    if not all(isinstance(value, str) for value in items):
        raise TypeError("text_array takes strings only")
    body = '","'.join(value.replace("\\", "\\\\").replace('"', '\\"') for value in items)
    if "\x00" in body:
        raise ValueError("text_array: PostgreSQL text cannot hold NUL (0x00) characters")
    return '{"' + body + '"}' if items else "{}"
