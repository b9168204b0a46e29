# The owners' version (migration 0029) renewed by every statement that writes mailboxes or
# their owners too: the dispatcher keeps each active owner's mailboxes with the owners
# (orchestrator.dispatch.reads.active_owners) instead of reading a window's mailbox links each
# cycle. A mailbox is configuration (its address, caps, warm-up, spacing, active flag: the
# admin, manage.py mailboxes, the deliverability guard's pause), so the version seldom moves
# for them. The same function and the same BEFORE-statement order as the owners' triggers: a
# writer takes the version row's lock before any mailbox's, so writers queue, never deadlock.

from django.db import migrations

from outreach.migration_operations import RunSQLOnPostgres

RENEW = """
CREATE TRIGGER outreach_mailbox_version_renew
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON outreach_mailbox
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_owners_version_renew();
CREATE TRIGGER outreach_mailbox_owners_version_renew
    BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON outreach_mailbox_owners
    FOR EACH STATEMENT EXECUTE FUNCTION outreach_owners_version_renew();
"""

DROP = """
DROP TRIGGER outreach_mailbox_owners_version_renew ON outreach_mailbox_owners;
DROP TRIGGER outreach_mailbox_version_renew ON outreach_mailbox;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("outreach", "0030_lead_suppressed_index"),
    ]

    operations = [RunSQLOnPostgres(RENEW, reverse_sql=DROP)]
