"""Organization.allow_phone_numbers: the draft policy refuses phone numbers unless it is set."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("outreach", "0006_organization_settings_verified_domains"),
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
