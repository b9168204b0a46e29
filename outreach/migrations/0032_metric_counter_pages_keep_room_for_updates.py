# The counters' rows are updated in place, over and over (a claim adds to one series per owner
# claimed: 500 rows a cycle at 10,000 owners), and a row's new version can stay on its page,
# writing no index entry (a HOT update), only while the page has room for it. Filled to the
# brim (fillfactor 100, PostgreSQL's default) a page had none until pruned, and a quarter of
# the updates wrote a new version elsewhere and an entry into the unique index. Half of each
# page is now kept free: every update stays in place, and the claim's upsert of 500 series
# took 4.4-8.2 ms where it took 6.5-9.6 (bench/dispatch.py's world at 10,000 owners, alternating
# four times, 2026-12-06; docs/dispatch.md, "The counters' pages keep room"). New pages are
# written so at once; the pages already full take it as they are rewritten (VACUUM FULL
# outreach_metriccounter, a short lock on a small table, applies it to every page now).

from django.db import migrations

from outreach.migration_operations import RunSQLOnPostgres


class Migration(migrations.Migration):
    dependencies = [
        ("outreach", "0031_owners_version_renewed_by_mailbox_writes"),
    ]

    operations = [
        RunSQLOnPostgres(
            "ALTER TABLE outreach_metriccounter SET (fillfactor = 50)",
            reverse_sql="ALTER TABLE outreach_metriccounter RESET (fillfactor)",
        ),
    ]
