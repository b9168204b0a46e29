"""DeadLetter moves from the outreach app to this one, without touching its data.

Only Django's idea of the model moves (state_operations); the table `outreach_deadletter`, its
rows, its sequence, index and foreign keys stay exactly as they are (no database_operations).
outreach 0005 removes the model from outreach's state after this one adds it here.

The ContentType row moves with it (outreach.deadletter -> orchestrator.deadletter): the
add/change/delete/view permissions point at that row, so users and groups granted them keep
them, now named orchestrator.change_deadletter and so on. Left alone, post_migrate would create
a new orchestrator.deadletter content type with fresh permissions nobody holds.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def content_type_move(*, apps, from_label: str, to_label: str) -> None:
    ContentType = apps.get_model("contenttypes", "ContentType")
    # A fresh database has no row yet (post_migrate creates content types after all
    # migrations): nothing to move. A target row can only exist if someone created it by hand;
    # then the unique (app_label, model) forbids the move and the old row is left for
    # remove_stale_contenttypes, rather than failing the deploy.
    if ContentType.objects.filter(app_label=to_label, model="deadletter").exists():
        return
    ContentType.objects.filter(app_label=from_label, model="deadletter").update(app_label=to_label)


def content_type_forward(apps, schema_editor):
    content_type_move(apps=apps, from_label="outreach", to_label="orchestrator")


def content_type_backward(apps, schema_editor):
    content_type_move(apps=apps, from_label="orchestrator", to_label="outreach")


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('orchestrator', '0002_queue_health_permission'),
        ('outreach', '0004_owner_daily_sends'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='DeadLetter',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('job_type', models.CharField(help_text='generation or send', max_length=40)),
                        ('payload', models.JSONField(default=dict, help_text='The original job: ids and idempotency key.')),
                        ('failure_class', models.CharField(choices=[('rate_limited', 'Rate limited (429)'), ('transient', 'Transient'), ('permanent', 'Permanent'), ('policy', 'Policy check failed'), ('exhausted', 'Retries exhausted'), ('stuck', 'Stuck (recovered)')], max_length=16)),
                        ('reason', models.TextField()),
                        ('retry_history', models.JSONField(default=list)),
                        ('suggested_action', models.CharField(max_length=200)),
                        ('status', models.CharField(choices=[('open', 'Open'), ('replayed', 'Replayed'), ('cancelled', 'Cancelled'), ('escalated', 'Escalated')], default='open', max_length=10)),
                        ('lead_id_ref', models.BigIntegerField(help_text='Lead id at failure time.')),
                        ('owner_id_ref', models.BigIntegerField(help_text='Owner id at failure time.')),
                        ('organization_id_ref', models.BigIntegerField(help_text='Organization id at failure time.')),
                        ('first_failed_at', models.DateTimeField(blank=True, null=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('resolved_at', models.DateTimeField(blank=True, null=True)),
                        ('replay_succeeded', models.BooleanField(blank=True, help_text='Set when a replayed job ends.', null=True)),
                        ('resolved_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('outreach', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='dead_letters', to='outreach.outreach')),
                    ],
                    options={
                        'db_table': 'outreach_deadletter',
                        'indexes': [models.Index(fields=['status', 'failure_class'], name='outreach_de_status_eee025_idx')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_forward, content_type_backward, elidable=False),
    ]
