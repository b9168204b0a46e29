"""The records' raw SQL: statements the ORM cannot say, such as an upsert that adds.

Plain typed functions, `<entity>_<action>`, keyword-only (STYLE rules 1 and 2), so no manager
holds logic and the SQL written by hand is reviewed in one place. Raw SQL bypasses the fields'
conversions (e.g. LeadEmailField's normalising): callers pass values as stored.
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime

from django.db import connection

from outreach.models.leads import Lead
from outreach.models.owners import Owner, OwnerDailySends


def owner_daily_sends_record(*, owner_id: int, sent_at: datetime, zone: str | None = None) -> None:
    """Count one email sent at `sent_at` on the owner's local day (one upsert).

    Called in the transaction that records SENT (outreach.transitions), so the count and the
    sent rows cannot disagree. The day is the owner's calendar day at `sent_at` in its time
    zone today; moving an owner to another zone mid-day leaves that day's count where it was.
    `zone`: the owner's time zone when the caller has it loaded (None: read here).
    """
    if zone is None:
        zone = Owner.objects.values_list("timezone", flat=True).get(pk=owner_id)
    day = sent_at.astimezone(zoneinfo.ZoneInfo(zone)).date()
    table = OwnerDailySends._meta.db_table
    # ON CONFLICT: two sends on one owner's new day both insert; the loser adds to the winner's
    # row instead of failing on owner_daily_sends_unique, with no read-modify-write between.
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (owner_id, day, sent) VALUES (%s, %s, 1) "
            f"ON CONFLICT (owner_id, day) DO UPDATE SET sent = {table}.sent + 1",
            [owner_id, day],
        )


def lead_status(*, lead_id: int) -> str | None:
    """The lead's status as stored now (None: no such lead). A plain statement: every job asks
    it before writing and before sending, and the ORM's compiling of it cost more than the read."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT status FROM {Lead._meta.db_table} WHERE id = %s", [lead_id])
        row = cursor.fetchone()
    return None if row is None else str(row[0])
