# The owners' version: one row whose token each statement writing outreach_owner or
# outreach_organization renews, in that statement's transaction (a statement-level trigger on
# each, TRUNCATE included), so the dispatcher keeps the active owners in memory and reads one
# row a cycle to know whether they changed, instead of every owner's (PostgreSQL only: the
# demo's SQLite reads the owners each cycle as before). A fresh random token, not a counter:
# a table emptied and written again never repeats a token a process may still hold. BEFORE the
# statement, not after: a transaction takes the version row's lock before any owner's or
# organization's row lock, so two writers of the same rows queue on the version row instead of
# each holding a row the other waits for (after, they could deadlock).

from django.db import migrations, models

from outreach.migration_operations import RunSQLOnPostgres

RENEW = """
CREATE FUNCTION outreach_owners_version_renew() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outreach_ownersversion (id, token, changed_at) VALUES (1, gen_random_uuid(), now())
    ON CONFLICT (id) DO UPDATE SET token = EXCLUDED.token, changed_at = EXCLUDED.changed_at;
    RETURN NULL;
END
$$;
CREATE TRIGGER outreach_owner_version_renew
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON outreach_owner
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_owners_version_renew();
CREATE TRIGGER outreach_organization_version_renew
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON outreach_organization
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_owners_version_renew();
"""

DROP = """
DROP TRIGGER outreach_organization_version_renew ON outreach_organization;
DROP TRIGGER outreach_owner_version_renew ON outreach_owner;
DROP FUNCTION outreach_owners_version_renew();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("outreach", "0028_partial_fk_indexes_drop_idempotency_like_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="OwnersVersion",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("token", models.UUIDField()),
                ("changed_at", models.DateTimeField()),
            ],
        ),
        RunSQLOnPostgres(RENEW, reverse_sql=DROP),
    ]
