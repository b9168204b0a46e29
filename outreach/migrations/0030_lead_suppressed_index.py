# The suppressed leads (opted out, bounced, complained), indexed by id: the dispatch cycle asks
# which of the rows it loaded have such a lead, and with few suppressed (as in most
# organizations) PostgreSQL answered by reading every lead, 10 ms a cycle at 100,000 leads.
# Built CONCURRENTLY on PostgreSQL, as lead_email_idx: a large leads table keeps taking writes.

from django.db import migrations, models

from outreach.migration_operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("outreach", "0029_owners_version_renewed_by_triggers"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="lead",
            index=models.Index(
                fields=["id"],
                name="lead_suppressed",
                condition=models.Q(status__in=["opted_out", "bounced", "complained"]),
            ),
        ),
    ]
