"""The admin's "Upload leads CSV" (on the assignment batches' list): the page, its form and the
permission. The checks and the batch are nurture.intake.upload's (the `assign_leads` command's
own, shared); this module only presents them: problems by line and field, capped for huge
files, or a redirect to the new batch's page, which shows its progress.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.defaultfilters import filesizeformat
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone

from backoffice.tenancy import scoped_rows
from nurture.intake.upload import UploadOutcome, assignment_upload
from outreach.models import Organization

# Uploading a lead CSV creates an assignment batch: Django's own "add" permission of the model
# (the admin's add form stays off; the upload page is the only way to add one in the admin).
UPLOAD_PERMISSION = "outreach.add_assignmentbatch"
# Problems listed on the upload page: a 100,000-row file of one bad column must not come back
# as megabytes of HTML; the rest are counted.
UPLOAD_ERRORS_SHOWN = 100
# The upload is checked in the request, in memory (a few times its size while parsed): beyond
# this, a file goes through `assign_leads` instead. 50 MB is about 400,000 typical rows.
UPLOAD_MAX_BYTES = 50 * 1024 * 1024


class LeadUploadForm(forms.Form):
    organization = forms.ModelChoiceField(
        queryset=Organization.objects.none(), help_text="The leads and their owners' organization."
    )
    file = forms.FileField(
        label="CSV file",
        help_text="Columns: email, first_name, last_name, company, title, timezone, owner (the owner's "
        "name in this organization). UTF-8; one row per lead.",
    )

    def __init__(self, *args: Any, organizations: QuerySet[Organization], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Only the uploader's organizations: a forged id of another one fails validation.
        field = self.fields["organization"]
        assert isinstance(field, forms.ModelChoiceField)
        field.queryset = organizations
        if organizations.count() == 1:
            field.initial = organizations.first()

    def clean_file(self) -> Any:
        upload = self.cleaned_data["file"]
        if upload.size > UPLOAD_MAX_BYTES:
            raise forms.ValidationError(
                f"The file is {filesizeformat(upload.size)}; an upload takes at most "
                f"{filesizeformat(UPLOAD_MAX_BYTES)}. Split it into smaller files, or load it with assign_leads."
            )
        return upload


class LeadUploadAdmin(admin.ModelAdmin):
    """The upload page and its button, for the assignment batches' admin (each upload is a batch)."""

    change_list_template = "admin/nurture/assignmentbatch_change_list.html"  # the button

    def has_view_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # An uploader follows the batch they started (of their organizations: get_queryset).
        return super().has_view_permission(request, obj) or request.user.has_perm(UPLOAD_PERMISSION)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) or request.user.has_perm(UPLOAD_PERMISSION)

    def get_urls(self) -> list[URLPattern]:
        upload = path(
            "upload/", self.admin_site.admin_view(self.upload_view), name="outreach_assignmentbatch_upload"
        )
        return [upload, *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        context = {"can_upload": request.user.has_perm(UPLOAD_PERMISSION), **(extra_context or {})}
        return super().changelist_view(request, context)

    def upload_view(self, request: HttpRequest) -> HttpResponse:
        """Upload a lead CSV: every row checked first, problems listed by line and field,
        nothing loaded unless the whole file is good; then the batch's page shows progress."""
        if not request.user.has_perm(UPLOAD_PERMISSION):
            raise PermissionDenied
        organizations = self._upload_organizations(request)
        form = LeadUploadForm(request.POST or None, request.FILES or None, organizations=organizations)
        outcome = None
        if request.method == "POST" and form.is_valid():
            upload = form.cleaned_data["file"]
            outcome = assignment_upload(
                organization=form.cleaned_data["organization"],
                file_name=upload.name or "upload.csv",
                chunks=upload.chunks(),
                now=timezone.now(),
            )
            done = self._upload_done(request, outcome, organization=form.cleaned_data["organization"])
            if done is not None:
                return done
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Upload leads CSV",
            "form": form,
            **_problems_context(outcome),
        }
        return TemplateResponse(request, "admin/nurture/lead_upload.html", context)

    def _upload_organizations(self, request: HttpRequest) -> QuerySet[Organization]:
        rows = None if request.user.is_superuser else scoped_rows(request=request, model=Organization)
        return (rows if rows is not None else Organization.objects.all()).order_by("name")

    def _upload_done(
        self, request: HttpRequest, outcome: UploadOutcome, *, organization: Organization
    ) -> HttpResponse | None:
        """Where a checked file goes: its batch's page, or back to the form with why not."""
        if outcome.errors:
            return None
        start = outcome.start
        if start is None:
            self.message_user(
                request, "The file has a header but no rows: nothing to load.", messages.WARNING
            )
            return None
        if start.batch is None:
            self.message_user(
                request,
                f"Nothing new: every lead of the file is already assigned in {organization} and has its "
                "sequence; no batch was created and no outreach was queued.",
                messages.WARNING,
            )
            return None
        verb = "resumed" if start.resumed else "started"
        ignored = (
            f" Ignored column(s): {', '.join(outcome.ignored_columns)}." if outcome.ignored_columns else ""
        )
        self.message_user(
            request,
            f"Assignment #{start.batch.pk} {verb}: {len(start.child_ids)} lead(s) of {organization} "
            f"are being loaded; this page shows the progress.{ignored}",
            messages.SUCCESS,
        )
        return HttpResponseRedirect(reverse("admin:outreach_assignmentbatch_change", args=[start.batch.pk]))


def _problems_context(outcome: UploadOutcome | None) -> dict[str, Any]:
    """The first UPLOAD_ERRORS_SHOWN problems and how many more, on how many lines."""
    if outcome is None or not outcome.errors:
        return {}
    errors = outcome.errors
    return {
        "problems": errors[:UPLOAD_ERRORS_SHOWN],
        "problems_total": len(errors),
        "problems_more": max(0, len(errors) - UPLOAD_ERRORS_SHOWN),
        "problem_lines": len({error.line for error in errors}),
    }
