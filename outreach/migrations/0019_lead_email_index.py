# An index on Lead.email alone: provider events and inbound mail look leads up by address across
# organizations. On PostgreSQL it is built CONCURRENTLY, so a large leads table keeps taking
# writes meanwhile; the demo's SQLite has no such thing and builds it plainly.

from django.db import migrations, models

from outreach.migration_operations import AddIndexConcurrentlyOnPostgres


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
