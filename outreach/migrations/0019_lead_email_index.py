# An index on Lead.email alone: provider events and inbound mail look leads up by address across
# organizations. Built CONCURRENTLY, so a large leads table keeps taking writes meanwhile.

from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("outreach", "0018_lead_reactivation_permission_and_history"),
    ]

    operations = [
        AddIndexConcurrently(
            model_name="lead",
            index=models.Index(fields=["email"], name="lead_email_idx"),
        ),
    ]
