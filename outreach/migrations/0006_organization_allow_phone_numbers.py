"""Organization.allow_phone_numbers: the draft policy refuses phone numbers unless it is set."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("outreach", "0005_deadletter_moved_to_orchestrator"),
    ]

    operations = [
        migrations.AddField(
            model_name="organization",
            name="allow_phone_numbers",
            field=models.BooleanField(
                db_default=False, default=False, help_text="Drafts may contain phone numbers."
            ),
        ),
    ]
