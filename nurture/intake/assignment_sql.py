"""The set-based writes of one assignment chunk: the database builds the rows from the children.

Why SQL and not bulk_create: a 100,000-lead file is 100,000 leads and 300,000 outreach rows,
and the ORM spends ~10 us of Python per field per row preparing values (over a minute in
total). `INSERT ... SELECT` from the children already in the table does the same work inside
the database, and `ON CONFLICT DO NOTHING RETURNING` counts exactly what was new even if two
runs race. The statements are portable between PostgreSQL and the demo's SQLite (>= 3.35):
ids are expanded `IN (...)` lists of at most one chunk, and only the small schedule table is
written per vendor. Columns the statements do not name get their model defaults.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.models import Model

from outreach.idempotency import INTRO_PREFIX, NUDGE_PREFIX, NUDGE_STEP_SEPARATOR
from outreach.models import AssignmentItem, Lead, Outreach, State

LEAD = Lead._meta.db_table
ITEM = AssignmentItem._meta.db_table
OUTREACH = Outreach._meta.db_table


def leads_insert(*, organization_id: int, child_ids: Sequence[int], now: datetime) -> set[int]:
    """Create the leads the children name that do not exist yet; return their ids."""
    named = ["organization_id", "owner_id", "email", "first_name", "last_name", "company", "title"]
    named += ["timezone", "status", "created_at"]
    columns, constants = _defaults(Lead, named)
    sql = f"""
        INSERT INTO {LEAD} ({", ".join(named + columns)})
        SELECT %s, i.owner_id, i.email, i.first_name, i.last_name, i.company, i.title,
               i.timezone, %s, %s{"".join(", %s" for _ in columns)}
        FROM {ITEM} i WHERE i.id IN ({_marks(child_ids)})
        ORDER BY i.id
        ON CONFLICT (organization_id, email) DO NOTHING
        RETURNING id
    """
    params = [organization_id, Lead.Status.ACTIVE, _when(now), *constants, *child_ids]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}


def sequences_insert(
    *, lead_ids: Sequence[int], schedule: Sequence[tuple[int, str, int, datetime]], now: datetime
) -> int:
    """Queue the intro and nudges of `lead_ids`; return how many rows were new.

    `schedule` = (owner id, time zone, step, due), step 0 being the intro: each lead gets the
    rows of its (owner, time zone). The unique idempotency key drops anything already there.
    """
    if not lead_ids or not schedule:
        return 0
    named = ["lead_id", "owner_id", "kind", "tier", "state", "not_before", "idempotency_key", "step"]
    named += ["created_at", "updated_at", "state_changed_at"]
    columns, constants = _defaults(Outreach, named)
    steps_sql, steps_params = _schedule_table(schedule)
    intro, nudge = Outreach.Kind.INTRO, Outreach.Kind.NUDGE
    # Leads are picked by primary key (never by a join the planner could misjudge: the tables
    # grow by 100,000s of rows during one load, faster than autovacuum refreshes statistics).
    # The keys are outreach.idempotency's intro_key / nudge_key, spelled in SQL from its parts.
    sql = f"""
        WITH steps (owner_id, timezone, step, due) AS ({steps_sql})
        INSERT INTO {OUTREACH} ({", ".join(named + columns)})
        SELECT l.id, l.owner_id,
               CASE WHEN s.step = 0 THEN %s ELSE %s END,
               CASE WHEN s.step = 0 THEN %s ELSE %s END,
               %s, s.due,
               CASE WHEN s.step = 0 THEN %s || l.id ELSE %s || l.id || %s || s.step END,
               s.step, %s, %s, %s{"".join(", %s" for _ in columns)}
        FROM {LEAD} l JOIN steps s ON s.owner_id = l.owner_id AND s.timezone = l.timezone
        WHERE l.id IN ({_marks(lead_ids)})
        ON CONFLICT (idempotency_key) DO NOTHING
        RETURNING id
    """
    params = [
        *steps_params,
        intro,
        nudge,
        Outreach.KIND_TIER[intro],
        Outreach.KIND_TIER[nudge],
        State.QUEUED,
        INTRO_PREFIX,
        NUDGE_PREFIX,
        NUDGE_STEP_SEPARATOR,
        _when(now),
        _when(now),
        _when(now),
        *constants,
        *lead_ids,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return len(cursor.fetchall())


def children_done(
    *, child_ids: Sequence[int], lead_ids: Sequence[int], new_ids: set[int], now: datetime
) -> None:
    """Mark the children DONE with their lead and outcome, in one UPDATE (leads joined by primary key)."""
    sql = f"""
        UPDATE {ITEM} SET status = %s, done_at = %s, lead_id = l.id,
            outcome = CASE WHEN l.id IN ({_marks(new_ids)}) THEN %s WHEN l.status = %s THEN %s ELSE %s END
        FROM {LEAD} l
        WHERE {ITEM}.id IN ({_marks(child_ids)}) AND l.id IN ({_marks(lead_ids)}) AND l.email = {ITEM}.email
    """
    outcome = AssignmentItem.Outcome
    params = [
        AssignmentItem.Status.DONE,
        _when(now),
        *new_ids,
        outcome.NEW,
        Lead.Status.ACTIVE,
        outcome.EXISTING,
        outcome.STOPPED,
        *child_ids,
        *lead_ids,
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _schedule_table(schedule: Sequence[tuple[int, str, int, datetime]]) -> tuple[str, list[Any]]:
    if connection.vendor == "postgresql":
        owners, zones, steps, dues = (list(column) for column in zip(*schedule, strict=True))
        sql = "SELECT * FROM unnest(%s::bigint[], %s::text[], %s::int[], %s::timestamptz[])"
        return sql, [owners, zones, steps, dues]
    rows = ", ".join("(%s, %s, %s, %s)" for _ in schedule)
    return f"VALUES {rows}", [
        v for owner, zone, step, due in schedule for v in (owner, zone, step, _when(due))
    ]


def _defaults(model: type[Model], named: Sequence[str]) -> tuple[list[str], list[Any]]:
    """Columns of `model` the statement does not name and their defaults, adapted for this database."""
    columns, values = [], []
    for field in model._meta.concrete_fields:
        if field.primary_key or field.column in named or (field.null and not field.has_default()):
            continue
        columns.append(connection.ops.quote_name(field.column))
        values.append(field.get_db_prep_save(field.get_default(), connection))
    return columns, values


def _marks(values: Collection[Any]) -> str:
    return ", ".join("%s" for _ in values) or "NULL"  # `IN (NULL)` matches nothing


def _when(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)
