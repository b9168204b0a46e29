"""Rows by the hundred thousand, for benchmarks and the tests of a cost that must not grow with
them: SQL copies of a row written through the ORM.

Why copies and not a column list written here: a bench inserts 10^6 rows, so it cannot go
through the ORM, and the hand-written INSERT bench/dispatch.py had rotted unseen when NOT NULL
columns were added. Copying the columns the model has now keeps every new column filled.
"""

from __future__ import annotations

from typing import Any

# Row g of a copy goes to lead number g mod (leads): every owner (one lead each) gets an equal share.
SPREAD = """CROSS JOIN generate_series(1, %s) g
    JOIN (SELECT id, owner_id, row_number() OVER (ORDER BY id) - 1 AS k FROM outreach_lead) l
      ON l.k = g %% (SELECT count(*) FROM outreach_lead)
    WHERE t.id = %s"""


def rows_clone(
    *, model: Any, template_id: int, rows_sql: str, overrides: dict[str, str], params: list[Any]
) -> None:
    """INSERT copies of the `model` row `template_id` (alias `t`), one per row of `rows_sql`
    (a FROM/JOIN tail ending in `WHERE t.id = %s`), with `overrides` (column -> SQL) and every
    other column copied. PostgreSQL."""
    from django.db import connection

    table, quote = model._meta.db_table, connection.ops.quote_name  # a column may be a keyword
    columns = [f.column for f in model._meta.concrete_fields if not f.primary_key]
    select = ", ".join(overrides.get(c, f"t.{quote(c)}") for c in columns)
    with connection.cursor() as cur:
        cur.execute(
            f"INSERT INTO {table} ({', '.join(map(quote, columns))}) SELECT {select} FROM {table} t {rows_sql}",
            [*params, template_id],
        )
