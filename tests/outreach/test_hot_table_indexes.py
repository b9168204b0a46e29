"""The tables every state move writes keep no index that another index already leads with: each
costs every move an index entry (a claim of 500 rows writes one per row and index) and serves no
lookup the longer one does not."""

from __future__ import annotations

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

HOT_TABLES = ("outreach_outreach", "outreach_outreachevent")


def _indexes(table: str, *, every_whole: bool = False) -> dict[str, tuple[str, ...]]:
    """The table's plain indexes (not unique, not partial, no operator class of their own), or
    with `every_whole` every index that is not partial: name -> columns in order."""
    plain = "" if every_whole else "AND NOT ix.indisunique AND i.relname NOT LIKE '%%\\_like'"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT i.relname, array_agg(a.attname ORDER BY k.n)
            FROM pg_index ix
            JOIN pg_class i ON i.oid = ix.indexrelid
            JOIN pg_class t ON t.oid = ix.indrelid
            CROSS JOIN LATERAL unnest(ix.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)
            JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
            WHERE t.relname = %s AND ix.indpred IS NULL {plain}
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


def test_a_state_move_writes_only_the_indexes_every_row_needs() -> None:
    # A move is not a HOT update (the state is in indexes), so it writes an entry into every
    # index the row's new version belongs to: every whole index, and each partial index whose
    # condition it meets. The whole ones are the id, the idempotency key's unique index, the
    # lead's (with the state) and the owner's; the foreign keys a row gets late (its approver,
    # its mailbox) are partial, and no LIKE index sits beside the idempotency key's.
    if connection.vendor != "postgresql":
        pytest.skip("reads PostgreSQL's catalog")
    whole = sorted(_indexes("outreach_outreach", every_whole=True).values())
    assert whole == [("id",), ("idempotency_key",), ("lead_id", "state"), ("owner_id",)]
