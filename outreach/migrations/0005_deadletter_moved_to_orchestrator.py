"""DeadLetter now belongs to the orchestrator app (orchestrator 0003 adds it there, with the same
table): remove it from this app's state only. The table and its rows stay."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('outreach', '0004_owner_daily_sends'),
        ('orchestrator', '0003_deadletter_moved_here'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='DeadLetter')],
            database_operations=[],
        ),
    ]
