"""Operations the migrations share (imported by them: keep each stable once a migration uses it)."""

from __future__ import annotations

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations


class AddIndexConcurrentlyOnPostgres(AddIndexConcurrently):
    """CREATE INDEX CONCURRENTLY on PostgreSQL, so a large table keeps taking writes while the
    index builds (the migration must be `atomic = False`); the demo's SQLite has no such thing
    and builds it plainly."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
        else:
            migrations.AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)


class DropFieldIndexConcurrentlyOnPostgres(migrations.AlterField):
    """An AlterField that only sets `db_index=False` on a foreign key whose own index another
    index leads with already: the index goes with DROP INDEX CONCURRENTLY on PostgreSQL, so the
    table keeps taking writes (the migration must be `atomic = False`), and plainly on the
    demo's SQLite. Backwards, it is built again the same way."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        self._index_sql(schema_editor, from_state, app_label, "DROP INDEX {concurrently} IF EXISTS {name}")

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        self._index_sql(
            schema_editor,
            to_state,
            app_label,
            "CREATE INDEX {concurrently} IF NOT EXISTS {name} ON {table} ({column})",
        )

    def _index_sql(self, schema_editor: Any, state: Any, app_label: str, template: str) -> None:
        model = state.apps.get_model(app_label, self.model_name)
        field = model._meta.get_field(self.name)
        table = model._meta.db_table
        # The name Django gave the field's index when it made it (the same on every backend).
        name = schema_editor._create_index_name(table, [field.column], suffix="")
        concurrently = "CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else ""
        schema_editor.execute(
            template.format(
                concurrently=concurrently,
                name=schema_editor.quote_name(name),
                table=schema_editor.quote_name(table),
                column=schema_editor.quote_name(field.column),
            )
        )


class DropLikeIndexConcurrentlyOnPostgres(migrations.operations.base.Operation):
    """Drop the `varchar_pattern_ops` index PostgreSQL's Django adds beside a unique CharField's
    own (for LIKE 'prefix%' lookups), CONCURRENTLY (the migration must be `atomic = False`); the
    model keeps `unique=True`, whose unique index stays. Nothing on SQLite, which has no such
    index. Backwards, it is built again the same way. Django drops it with IF EXISTS when it
    alters the field, so its absence never fails a later migration."""

    reduces_to_sql = False
    reversible = True

    def __init__(self, model_name: str, name: str) -> None:
        self.model_name, self.name = model_name, name

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # the model state has no record of the index

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        self._index_sql(schema_editor, from_state, app_label, "DROP INDEX CONCURRENTLY IF EXISTS {name}")

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        self._index_sql(
            schema_editor,
            to_state,
            app_label,
            "CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} ({column} varchar_pattern_ops)",
        )

    def describe(self) -> str:
        return f"Drop the LIKE index of {self.model_name}.{self.name} concurrently"

    def _index_sql(self, schema_editor: Any, state: Any, app_label: str, template: str) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        model = state.apps.get_model(app_label, self.model_name)
        column = model._meta.get_field(self.name).column
        table = model._meta.db_table
        # The name Django's PostgreSQL schema editor gave it (schema.py, `_create_like_index_sql`).
        name = schema_editor._create_index_name(table, [column], suffix="_like")
        schema_editor.execute(
            template.format(
                name=schema_editor.quote_name(name),
                table=schema_editor.quote_name(table),
                column=schema_editor.quote_name(column),
            )
        )
