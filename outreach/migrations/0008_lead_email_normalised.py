"""A lead's email is its identity: stored trimmed and lower-cased, so the existing
unique (organization, email) constraint holds whatever case an address was typed in.

Existing rows are normalised in place. Two leads of one organization whose addresses differ
only in case or surrounding spaces are the same person twice; this migration does NOT merge
them and stops instead, listing each group (organization, address, lead ids), with nothing
changed. Merging is not safe to do blindly: each lead has its own sequence (intro and nudges
keyed by lead id), its own status (one may have opted out, the other be active) and its own
sent history, and picking a survivor could email someone who unsubscribed or send a second
intro. Resolve each group by hand (keep one lead; cancel or delete the others' queued outreach;
delete or re-address the others), then run `migrate` again. README, "Lead identity".
"""

from __future__ import annotations

from typing import Any

from django.db import connection as default_connection
from django.db import migrations, models
from django.db.models import Q
from django.db.models.functions import Lower, Trim

import outreach.models

SHOWN = 50  # groups listed in the message; the count says how many there are in all

_DUPLICATES = """
    SELECT organization_id, lower(trim(email)), array_agg(id ORDER BY id)
    FROM outreach_lead
    GROUP BY organization_id, lower(trim(email))
    HAVING count(*) > 1
    ORDER BY organization_id, lower(trim(email))
"""


def lead_emails_normalise(apps: Any, schema_editor: Any) -> None:
    connection = schema_editor.connection if schema_editor is not None else default_connection
    with connection.cursor() as cursor:
        cursor.execute(_DUPLICATES)
        groups = cursor.fetchall()
        if groups:
            raise RuntimeError(_refusal(groups))
        cursor.execute("UPDATE outreach_lead SET email = lower(trim(email)) WHERE email <> lower(trim(email))")
        if cursor.rowcount:
            print(f"\n  normalised {cursor.rowcount} lead email address(es) (trimmed, lower-cased)")


def _refusal(groups: list[tuple[int, str, list[int]]]) -> str:
    lines = [
        f"  organization {org}: {email!r} is lead ids {', '.join(map(str, ids))}"
        for org, email, ids in groups[:SHOWN]
    ]
    more = [f"  ... and {len(groups) - SHOWN} more group(s)"] if len(groups) > SHOWN else []
    return "\n".join(
        [
            f"{len(groups)} group(s) of leads share an email address up to case or spaces, so the "
            "case-insensitive uniqueness of lead emails cannot be added. Nothing was changed.",
            *lines,
            *more,
            "Resolve each group (keep one lead; cancel the others' queued outreach and delete or "
            "re-address those leads), then run migrate again. Not merged automatically: see this "
            "migration's docstring.",
        ]
    )


class Migration(migrations.Migration):
    dependencies = [
        ("outreach", "0007_organization_allow_phone_numbers"),
    ]

    operations = [
        migrations.AlterField(
            model_name="lead",
            name="email",
            field=outreach.models.LeadEmailField(max_length=254),
        ),
        migrations.RunPython(lead_emails_normalise, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="lead",
            constraint=models.CheckConstraint(
                condition=Q(email=Lower(Trim("email"))),
                name="lead_email_normalised",
                violation_error_message="A lead's email is stored trimmed and lower-case.",
            ),
        ),
    ]
