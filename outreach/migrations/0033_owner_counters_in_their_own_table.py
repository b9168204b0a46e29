# An owner's two counters (outreach_owner_dispatched, outreach_owner_sent) move out of
# outreach_metriccounter into a table keyed by (owner_id, shard): a claim adds to one series per
# owner claimed, and as a name and a label's text each they were the bulk of the claim's upsert
# (docs/dispatch.md, "An owner's counters in their own table"). The stored totals move with
# them, shard by shard, so every series reads back as it did and Prometheus sees no reset.
# Backwards, they move back. While a process of the code before still runs it adds to
# MetricCounter rows again, which the code after reads too (counters_read); a web process of
# the code before no longer sees the moved totals, so deploy the web processes with it.

from django.db import migrations, models

from outreach.migration_operations import RunSQLOnPostgres

OWNER_SERIES = "name IN ('outreach_owner_dispatched', 'outreach_owner_sent') AND substr(labels, 1, 9) = 'owner_id='"

MOVE_IN = [
    f"""
    INSERT INTO outreach_ownercounter (owner_id, shard, dispatched, sent)
    SELECT CAST(substr(labels, 10) AS bigint), shard,
           SUM(CASE WHEN name = 'outreach_owner_dispatched' THEN value ELSE 0 END),
           SUM(CASE WHEN name = 'outreach_owner_sent' THEN value ELSE 0 END)
    FROM outreach_metriccounter WHERE {OWNER_SERIES}
    GROUP BY CAST(substr(labels, 10) AS bigint), shard
    """,
    f"DELETE FROM outreach_metriccounter WHERE {OWNER_SERIES}",
]
# Onto whatever a process of the code before wrote there since (ON CONFLICT: both vendors').
MOVE_OUT = [
    """
    INSERT INTO outreach_metriccounter (name, labels, shard, value)
    SELECT n, 'owner_id=' || CAST(owner_id AS text), shard, v FROM (
        SELECT 'outreach_owner_dispatched' AS n, owner_id, shard, dispatched AS v FROM outreach_ownercounter
        UNION ALL
        SELECT 'outreach_owner_sent', owner_id, shard, sent FROM outreach_ownercounter
    ) AS s WHERE v <> 0
    ON CONFLICT (name, labels, shard) DO UPDATE SET value = outreach_metriccounter.value + excluded.value
    """,
]


class Migration(migrations.Migration):
    dependencies = [
        ("outreach", "0032_metric_counter_pages_keep_room_for_updates"),
    ]

    operations = [
        migrations.CreateModel(
            name="OwnerCounter",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("owner_id", models.BigIntegerField()),
                ("shard", models.PositiveSmallIntegerField(default=0)),
                ("dispatched", models.BigIntegerField(default=0)),
                ("sent", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("owner_id", "shard"), name="owner_counter_unique")],
            },
        ),
        RunSQLOnPostgres(
            "ALTER TABLE outreach_ownercounter SET (fillfactor = 50)",
            reverse_sql="ALTER TABLE outreach_ownercounter RESET (fillfactor)",
        ),
        migrations.RunSQL(MOVE_IN, reverse_sql=MOVE_OUT),
    ]
