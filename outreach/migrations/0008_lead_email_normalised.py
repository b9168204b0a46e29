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

from django.db import migrations, models
from django.db.models import Count, Q
from django.db.models.functions import Lower, Trim

import outreach.models

SHOWN = 50  # groups listed in the message; the count says how many there are in all

def lead_emails_normalise(apps: Any, schema_editor: Any) -> None:
    """Portable (PostgreSQL in production, SQLite in the demo): grouping and the update in the ORM."""
    lead = apps.get_model("outreach", "Lead")
    normalised = Lower(Trim("email"))
    duplicated = (
        lead.objects.annotate(key=normalised)
        .values("organization_id", "key")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .order_by("organization_id", "key")
    )
    groups = [
        (
            row["organization_id"],
            row["key"],
            sorted(
                lead.objects.annotate(key=normalised)
                .filter(organization_id=row["organization_id"], key=row["key"])
                .values_list("id", flat=True)
            ),
        )
        for row in duplicated
    ]
    if groups:
        raise RuntimeError(_refusal(groups))
    changed = lead.objects.exclude(email=normalised).update(email=normalised)
    if changed:
        print(f"\n  normalised {changed} lead email address(es) (trimmed, lower-cased)")


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
