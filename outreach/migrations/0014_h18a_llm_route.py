from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("outreach", "0013_h16a_email_providers"),
    ]

    operations = [
        migrations.AlterField(
            model_name="outreach",
            name="reservation_id",
            field=models.CharField(blank=True, max_length=255),
        ),
        migrations.AddField(
            model_name="outreach",
            name="llm_route",
            field=models.CharField(blank=True, max_length=255),
        ),
    ]
