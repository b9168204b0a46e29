# Three indexes of outreach_outreach every state move wrote an entry into and no lookup needs
# whole: the foreign keys approved_by and mailbox get partial indexes (only rows that have
# one) in place of their full ones, and the LIKE index beside idempotency_key's unique index
# goes (nothing looks it up by prefix; the admin's search is a case-insensitive contains,
# which it cannot serve). Each CONCURRENTLY on PostgreSQL: the new index is built before the
# old one goes.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

from outreach.migration_operations import (
    AddIndexConcurrentlyOnPostgres,
    DropFieldIndexConcurrentlyOnPostgres,
    DropLikeIndexConcurrentlyOnPostgres,
)


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("outreach", "0027_drop_fk_indexes_other_indexes_lead_with"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        AddIndexConcurrentlyOnPostgres(
            model_name="outreach",
            index=models.Index(
                condition=models.Q(("approved_by__isnull", False)),
                fields=["approved_by"],
                name="outreach_approved_by_set",
            ),
        ),
        DropFieldIndexConcurrentlyOnPostgres(
            model_name="outreach",
            name="approved_by",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to=settings.AUTH_USER_MODEL,
            ),
        ),
        AddIndexConcurrentlyOnPostgres(
            model_name="outreach",
            index=models.Index(
                condition=models.Q(("mailbox__isnull", False)),
                fields=["mailbox"],
                name="outreach_mailbox_set",
            ),
        ),
        DropFieldIndexConcurrentlyOnPostgres(
            model_name="outreach",
            name="mailbox",
            field=models.ForeignKey(
                blank=True,
                db_index=False,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="outreach",
                to="outreach.mailbox",
            ),
        ),
        DropLikeIndexConcurrentlyOnPostgres(model_name="outreach", name="idempotency_key"),
    ]
