"""The tables every state move writes keep no index that another index already leads with: each
costs every move an index entry (a claim of 500 rows writes one per row and index) and serves no
lookup the longer one does not."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

HOT_TABLES = ("outreach_outreach", "outreach_outreachevent")


def _indexes(table: str) -> dict[str, tuple[str, ...]]:
    """The table's plain indexes (not unique, not partial, no operator class of their own):
    name -> columns in order."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT i.relname, array_agg(a.attname ORDER BY k.n)
            FROM pg_index ix
            JOIN pg_class i ON i.oid = ix.indexrelid
            JOIN pg_class t ON t.oid = ix.indrelid
            CROSS JOIN LATERAL unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
            WHERE t.relname = %s AND NOT ix.indisunique AND ix.indpred IS NULL
              AND i.relname NOT LIKE '%%\\_like'
            GROUP BY i.relname
            """,
            [table],
        )
        return {name: tuple(columns) for name, columns in cursor.fetchall()}


@pytest.mark.parametrize("table", HOT_TABLES)
def test_no_index_of_a_hot_table_is_the_start_of_another(table: str) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("reads PostgreSQL's catalog")
    indexes = _indexes(table)
    assert indexes  # the catalog query reads the table's indexes
    redundant = [
        f"{name} {columns} starts {other} {longer}"
        for name, columns in indexes.items()
        for other, longer in indexes.items()
        if len(longer) > len(columns) and longer[: len(columns)] == columns
    ]
    assert redundant == []
