# Two foreign-key indexes another index already leads with: outreach.lead (outreach_lead_state:
# lead, state) and outreachevent.outreach (the (outreach, at) index). Every state move wrote an
# entry into each. Dropped CONCURRENTLY on PostgreSQL.

import django.db.models.deletion
from django.db import migrations, models

from outreach.migration_operations import DropFieldIndexConcurrentlyOnPostgres


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("outreach", "0026_ready_owners_by_tier_index"),
    ]

    operations = [
        DropFieldIndexConcurrentlyOnPostgres(
            model_name="outreach",
            name="lead",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="outreach",
                to="outreach.lead",
            ),
        ),
        DropFieldIndexConcurrentlyOnPostgres(
            model_name="outreachevent",
            name="outreach",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="outreach.outreach",
            ),
        ),
    ]
