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
        _field_index_sql(
            schema_editor,
            from_state.apps.get_model(app_label, self.model_name),
            self.name,
            "DROP INDEX {concurrently} IF EXISTS {name}",
        )

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        _field_index_sql(
            schema_editor,
            to_state.apps.get_model(app_label, self.model_name),
            self.name,
            "CREATE INDEX {concurrently} IF NOT EXISTS {name} ON {table} ({column})",
        )


def _field_index_sql(
    schema_editor: Any, model: Any, field_name: str, template: str, *, suffix: str = ""
) -> None:
    """Run `template` for the index Django gave `field_name` when it made it (the same name on
    every backend; `suffix` "_like": PostgreSQL's pattern-ops index beside a CharField's),
    CONCURRENTLY on PostgreSQL."""
    column = model._meta.get_field(field_name).column
    table = model._meta.db_table
    name = schema_editor._create_index_name(table, [column], suffix=suffix)
    schema_editor.execute(
        template.format(
            concurrently="CONCURRENTLY" if schema_editor.connection.vendor == "postgresql" else "",
            name=schema_editor.quote_name(name),
            table=schema_editor.quote_name(table),
            column=schema_editor.quote_name(column),
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
        if schema_editor.connection.vendor == "postgresql":
            _field_index_sql(
                schema_editor,
                from_state.apps.get_model(app_label, self.model_name),
                self.name,
                "DROP INDEX {concurrently} IF EXISTS {name}",
                suffix="_like",
            )

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            _field_index_sql(
                schema_editor,
                to_state.apps.get_model(app_label, self.model_name),
                self.name,
                "CREATE INDEX {concurrently} IF NOT EXISTS {name} ON {table} ({column} varchar_pattern_ops)",
                suffix="_like",
            )

    def describe(self) -> str:
        return f"Drop the LIKE index of {self.model_name}.{self.name} concurrently"


class RunSQLOnPostgres(migrations.RunSQL):
    """SQL only PostgreSQL runs (its triggers and functions); the demo's SQLite skips it, and
    whatever reads what the SQL maintains must work without it there."""

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor == "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)
