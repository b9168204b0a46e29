# The owners with ready work in a tier, found by a loose scan (one index probe per owner found,
# stopping after a window's worth) instead of a probe per active owner. Built CONCURRENTLY on
# PostgreSQL.

from django.db import migrations, models

from outreach.migration_operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("outreach", "0025_queued_rows_in_line_index"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="outreach",
            index=models.Index(
                condition=models.Q(("state", "queued")),
                fields=["tier", "owner", "not_before"],
                name="outreach_ready_by_tier_owner",
            ),
        ),
    ]
