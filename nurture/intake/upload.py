"""An assignment CSV uploaded in the admin: the same checks and the same batch as the
`assign_leads` command (csv_file validates, assignment starts the batch), into the one
organization the uploader chose, then handed to the orchestrator workers (--fan-out's path):
the request returns at once and the batch's admin page shows the progress.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from nurture.intake.assignment import AssignmentStart, assignment_start, owner_directory_load
from nurture.intake.csv_file import RowError, csv_decode, parse_assignment_csv
from nurture.intake.tasks import intake_enqueue
from outreach.models import Organization


@dataclass(frozen=True)
class UploadOutcome:
    """Problems (then nothing was written), or what started (`start` None with no problems: a
    header without rows)."""

    errors: list[RowError]
    start: AssignmentStart | None
    ignored_columns: tuple[str, ...] = ()


def assignment_upload(
    *, organization: Organization, file_name: str, chunks: Iterable[bytes], now: datetime
) -> UploadOutcome:
    """Validate every row of the file against `organization`'s owners only (an owner of another
    organization is "unknown" here); on no problem at all, start (or resume) its batch and queue it."""
    digest, parts = hashlib.sha256(), []
    for chunk in chunks:  # the upload arrives in chunks (spooled to disk when large)
        digest.update(chunk)
        parts.append(chunk)
    text = csv_decode(raw=b"".join(parts))
    if isinstance(text, RowError):
        return UploadOutcome(errors=[text], start=None)
    parsed = parse_assignment_csv(text=text, owners=owner_directory_load(organization=organization.name))
    if parsed.errors or not parsed.rows:
        return UploadOutcome(errors=parsed.errors, start=None, ignored_columns=parsed.ignored_columns)
    start = assignment_start(
        organization_id=organization.pk,
        file_name=file_name,
        file_sha256=digest.hexdigest(),
        rows=parsed.rows,
        now=now,
    )
    if start.batch is not None:
        intake_enqueue(batch_id=start.batch.pk, child_ids=start.child_ids)
    return UploadOutcome(errors=[], start=start, ignored_columns=parsed.ignored_columns)
