"""CSV export of an admin changelist: exactly the rows the user's list shows (its filters, its
search, its ordering, its tenancy; every page), streamed, every text cell neutralised against
formula injection. One home for the three lists that export (leads, outreach, dead letters).

Why streamed: a 100,000-row export must not be built in memory; rows are read with a
server-side cursor (`iterator`) and written a line at a time as the response is sent.
Why neutralised: a spreadsheet opening the file runs a cell that starts with `=`, `+`, `-`,
`@`, a tab or a carriage return as a formula (OWASP "CSV Injection"); leads' names and
companies come from uploaded files and drafts from an LLM, so any of them may be hostile.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponseBase, HttpResponseRedirect, StreamingHttpResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

# OWASP's list: what makes Excel, LibreOffice or Google Sheets read a cell as a formula.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
CHUNK_ROWS = 2000  # rows per server-side cursor fetch


def cell_neutralise(value: object) -> object:
    """`value` safe in a spreadsheet: a text that would start a formula gets a leading `'` (the
    spreadsheet shows it as text). Numbers, dates and empty values pass as they are: they
    cannot carry a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_TRIGGERS):
        return "'" + value
    return value


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat()
    return cell_neutralise(value)


class _Line:
    """A file-like object whose write returns the line: csv.writer then yields lines, not a file."""

    def write(self, value: str) -> str:
        return value


def csv_lines(*, header: Sequence[str], rows: Iterable[Sequence[object]]) -> Iterator[str]:
    """The CSV text, one line at a time: the header, then each row with its cells neutralised."""
    writer = csv.writer(_Line())
    yield writer.writerow([cell_neutralise(name) for name in header])
    for row in rows:
        yield writer.writerow([_cell(value) for value in row])


class CsvExportAdmin(admin.ModelAdmin):
    """An "Export CSV" button on the changelist (templates/admin/csv_export_change_list.html)
    that downloads what the list shows. `export_fields` are the columns, as ORM lookups
    (e.g. "owner__name"). Only users who may view the model; rows through the admin's own
    changelist, so its get_queryset (the tenancy gate) and filters apply unchanged."""

    export_fields: tuple[str, ...] = ()
    change_list_template = "admin/csv_export_change_list.html"

    def get_urls(self) -> list[URLPattern]:
        name = f"{self.opts.app_label}_{self.opts.model_name}_export"
        view = self.admin_site.admin_view(self.export_csv_view)
        return [path("export.csv", view, name=name), *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_export")
        query = request.GET.urlencode()
        context = {"export_csv_url": f"{url}?{query}" if query else url, **(extra_context or {})}
        return super().changelist_view(request, context)

    def export_csv_view(self, request: HttpRequest) -> HttpResponseBase:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            # The changelist's own answer to a filter it does not know: back to it, "?e=1".
            return HttpResponseRedirect(
                reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist") + "?e=1"
            )
        rows = changelist.queryset.values_list(*self.export_fields).iterator(chunk_size=CHUNK_ROWS)
        response = StreamingHttpResponse(
            csv_lines(header=self.export_fields, rows=rows), content_type="text/csv; charset=utf-8"
        )
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="{self.opts.model_name}-{stamp}.csv"'
        return response
