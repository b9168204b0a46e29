# The next queued rows with no draft, of all owners, in order (not_before, id): the dispatcher writes
# why LLM work waits on them without sorting the whole queue. Built CONCURRENTLY on PostgreSQL.

from django.db import migrations, models

from outreach.migration_operations import AddIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("outreach", "0024_referral_proposals_reclassify_permission_and_reply_class_checks"),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="outreach",
            index=models.Index(
                condition=models.Q(("draft_body", ""), ("state", "queued")),
                fields=["not_before", "id"],
                name="outreach_queued_in_line",
            ),
        ),
    ]
