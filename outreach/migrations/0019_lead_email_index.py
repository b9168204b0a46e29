# An index on Lead.email alone: provider events and inbound mail look leads up by address across
# organizations. On PostgreSQL it is built CONCURRENTLY, so a large leads table keeps taking
# writes meanwhile; the demo's SQLite has no such thing and builds it plainly.

from typing import Any

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class AddIndexConcurrentlyOnPostgres(AddIndexConcurrently):
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


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("outreach", "0018_lead_reactivation_permission_and_history"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="lead",
            index=models.Index(fields=["email"], name="lead_email_idx"),
        ),
    ]
