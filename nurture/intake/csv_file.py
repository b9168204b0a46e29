"""Reading and validating an assignment CSV: pure functions of (file text, owner directory).

Every row is checked before anything is written, and every problem is reported as
`line N: <field>: <reason>` with N as the user sees it in an editor (header = line 1; a quoted
value spanning lines counts all its lines). A file with any problem loads nothing.
"""

from __future__ import annotations

import csv
import io
import zoneinfo
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

COLUMNS = ("email", "first_name", "last_name", "company", "title", "timezone", "owner")
REQUIRED_VALUES = ("email", "timezone", "owner")  # names, company and title may be blank
MAX_LENGTH = {"email": 254, "first_name": 100, "last_name": 100, "company": 200, "title": 200}


@dataclass(frozen=True)
class RowError:
    line: int
    field: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field}: {self.reason}"


@dataclass(frozen=True)
class LeadRow:
    """A valid row: the email lower-cased (addresses are matched case-insensitively)."""

    line: int
    email: str
    first_name: str
    last_name: str
    company: str
    title: str
    timezone: str
    owner_id: int


@dataclass(frozen=True)
class OwnerRef:
    id: int
    name: str
    organization_id: int
    organization_name: str
    active: bool


@dataclass(frozen=True)
class OwnerDirectory:
    """The owners a file may name: one organization's (--org) or every organization's."""

    owners: Sequence[OwnerRef]
    by_name: dict[str, list[OwnerRef]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        index: dict[str, list[OwnerRef]] = defaultdict(list)
        for ref in self.owners:
            index[ref.name.casefold()].append(ref)
        object.__setattr__(self, "by_name", dict(index))

    def resolve(self, name: str) -> OwnerRef | str:
        """The owner called `name` (exact spelling first, then any case), or why there is none."""
        candidates = self.by_name.get(name.casefold(), [])
        exact = [ref for ref in candidates if ref.name == name]
        candidates = exact or candidates
        if not candidates:
            return (
                f"unknown owner {name!r} "
                "(create it in the admin's Owners or with add_owner, or check the spelling)"
            )
        if len({ref.organization_id for ref in candidates}) > 1:
            orgs = ", ".join(sorted(ref.organization_name for ref in candidates))
            return f"owner {name!r} exists in several organizations ({orgs}): pass --org"
        if len(candidates) > 1:
            return (
                f"owner {name!r} matches {len(candidates)} owners differing only in case: use the exact name"
            )
        if not candidates[0].active:
            return f"owner {name!r} is not active"
        return candidates[0]


@dataclass(frozen=True)
class ParsedFile:
    rows: list[LeadRow]
    errors: list[RowError]
    organization_id: int | None
    ignored_columns: tuple[str, ...] = ()


def csv_decode(*, raw: bytes) -> str | RowError:
    """The file's text, or where it stops being UTF-8 (the line as an editor counts it)."""
    try:
        return raw.decode("utf-8-sig")  # -sig: spreadsheets often start UTF-8 files with a BOM
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return RowError(line, "file", f"not UTF-8 text (byte {exc.start}); save the file as UTF-8")


def parse_assignment_csv(*, text: str, owners: OwnerDirectory) -> ParsedFile:
    """Validate every row of `text`; rows are only usable when `errors` is empty."""
    records = _records(text)
    try:
        header_line, header = next(records)
    except StopIteration:
        return ParsedFile(
            [], [RowError(1, "header", "the file is empty: expected " + ", ".join(COLUMNS))], None
        )
    except _Unreadable as exc:
        return ParsedFile([], [RowError(exc.line, "header", str(exc))], None)
    names = [_column_name(value) for value in header]
    problems = _header_problems(names, line=header_line)
    if problems:
        return ParsedFile([], problems, None)
    rows, errors = _rows(records, names=names, owners=owners)
    org_id, org_errors = _one_organization(rows, owners=owners)
    ignored = tuple(name for name in names if name not in COLUMNS)
    return ParsedFile(rows if not (errors or org_errors) else [], errors + org_errors, org_id, ignored)


class _Unreadable(Exception):
    def __init__(self, line: int, exc: csv.Error) -> None:
        super().__init__(f"not readable as CSV: {exc}")
        self.line = line


def _records(text: str) -> Iterator[tuple[int, list[str]]]:
    """(first line of the record, values) for each non-blank record."""
    reader = csv.reader(io.StringIO(text, newline=""))
    while True:
        start = reader.line_num + 1
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise _Unreadable(start, exc) from exc
        if any(value.strip() for value in values):
            yield start, values


def _column_name(value: str) -> str:
    return value.strip().lower().replace(" ", "_").replace("-", "_")


def _header_problems(names: list[str], *, line: int) -> list[RowError]:
    problems = []
    missing = [column for column in COLUMNS if column not in names]
    if missing:
        problems.append(RowError(line, "header", "missing column(s): " + ", ".join(missing)))
    repeated = sorted({name for name in names if name in COLUMNS and names.count(name) > 1})
    if repeated:
        problems.append(RowError(line, "header", "column(s) given twice: " + ", ".join(repeated)))
    return problems


def _rows(
    records: Iterator[tuple[int, list[str]]], *, names: list[str], owners: OwnerDirectory
) -> tuple[list[LeadRow], list[RowError]]:
    rows: list[LeadRow] = []
    errors: list[RowError] = []
    first_line_of: dict[str, int] = {}
    try:
        for line, values in records:
            if len(values) != len(names):
                errors.append(RowError(line, "columns", f"expected {len(names)} values, found {len(values)}"))
                continue
            record = {name: value.strip() for name, value in zip(names, values, strict=True)}
            row, row_errors = _row(line, record, owners=owners)
            email = record["email"].lower()
            if email and email in first_line_of:
                row_errors.append(RowError(line, "email", f"duplicate of line {first_line_of[email]}"))
            first_line_of.setdefault(email, line)
            errors.extend(row_errors)
            if row is not None and not row_errors:
                rows.append(row)
    except _Unreadable as exc:  # e.g. a field over the size limit: the rest cannot be split reliably
        errors.append(RowError(exc.line, "row", str(exc)))
    return rows, errors


def _row(
    line: int, record: dict[str, str], *, owners: OwnerDirectory
) -> tuple[LeadRow | None, list[RowError]]:
    errors = [RowError(line, name, "is empty") for name in REQUIRED_VALUES if not record[name]]
    errors += [
        RowError(line, name, f"longer than {limit} characters")
        for name, limit in MAX_LENGTH.items()
        if len(record[name]) > limit
    ]
    # PostgreSQL text cannot hold NUL; a stray one usually means a binary or mis-encoded file.
    errors += [RowError(line, name, "contains a NUL character") for name in COLUMNS if "\x00" in record[name]]
    if errors:
        return None, errors
    email, zone, owner = record["email"].lower(), record["timezone"], owners.resolve(record["owner"])
    if not _email_ok(email):
        errors.append(RowError(line, "email", f"{record['email']!r} is not a valid email address"))
    if zone not in _zones():
        errors.append(RowError(line, "timezone", _zone_reason(zone)))
    if isinstance(owner, str):
        errors.append(RowError(line, "owner", owner))
    if errors or isinstance(owner, str):
        return None, errors
    names = {k: record[k] for k in ("first_name", "last_name", "company", "title")}
    return LeadRow(line=line, email=email, timezone=zone, owner_id=owner.id, **names), []


def _one_organization(
    rows: Iterable[LeadRow], *, owners: OwnerDirectory
) -> tuple[int | None, list[RowError]]:
    """A file loads into one organization: the one of its owners (the first row's, if they differ)."""
    org_of = {ref.id: ref for ref in owners.owners}
    first: OwnerRef | None = None
    errors = []
    for row in rows:
        ref = org_of[row.owner_id]
        first = first or ref
        if ref.organization_id != first.organization_id:
            errors.append(
                RowError(
                    row.line,
                    "owner",
                    f"{ref.name!r} is in organization {ref.organization_name!r} but earlier rows are in "
                    f"{first.organization_name!r}: a file loads into one organization (pass --org)",
                )
            )
    return (first.organization_id if first else None), errors


def _email_ok(email: str) -> bool:
    try:
        validate_email(email)
    except ValidationError:
        return False
    return True


@cache
def _zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones())


@cache
def _zones_by_casefold() -> dict[str, str]:
    return {zone.casefold(): zone for zone in _zones()}


def _zone_reason(zone: str) -> str:
    hint = _zones_by_casefold().get(zone.casefold())
    suggestion = f" (did you mean {hint}?)" if hint else " (use an IANA name such as Europe/Berlin)"
    return f"unknown time zone {zone!r}{suggestion}"
