"""Owners: their limits, hours and review setting, with Pause / Resume (backoffice/admin/pauses.py)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils import timezone

from backoffice.actions import admin_user
from backoffice.admin.pauses import PauseActions
from backoffice.tenancy import APPROVE_PERMISSION, SETTINGS_PERMISSION, OrganizationScopedAdmin
from orchestrator.dispatch.owner_limits import owner_rules
from orchestrator.dispatch.reads import Committed, committed_today
from outreach.models import MIDNIGHT, Organization, Owner, working_days_text
from outreach.services import owners as services


class OwnerForm(forms.ModelForm):
    # No Meta: the admin builds it from OwnerAdmin (model and fields).

    def clean(self) -> dict[str, Any]:
        # The database refuses it too (owner_hours_order); this says so in words, on the field.
        data = super().clean() or self.cleaned_data
        start, end = data.get("hours_start"), data.get("hours_end")
        if start is not None and end is not None and start >= end and end != MIDNIGHT:
            self.add_error(
                "hours_end",
                "Operating hours must end after they start, e.g. 09:00-17:00 (an end of 00:00 is "
                "midnight: 00:00-00:00 is round the clock).",
            )
        return data


@admin.register(Owner)
class OwnerAdmin(PauseActions, OrganizationScopedAdmin):
    form = OwnerForm
    list_display = (
        "name",
        "kind",
        "organization",
        "daily_limit",
        "today",
        "hours_start",
        "hours_end",
        "days",
        "timezone",
        "review_required",
        "weight",
        "active",
    )
    list_filter = ("kind", "review_required", "active", "organization")
    search_fields = ("name",)
    REVIEW_AUDIT = ("review_disabled_by", "review_disabled_at", "review_disabled_via")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # Turning review off lets drafts go out unread: only an approver may. Without the
        # permission the box is read-only while it is ticked (ticking it stays open to all).
        # An owner's weight is its share of the shared LLM budget: an organization-wide setting.
        locked = obj is not None and obj.review_required and not request.user.has_perm(APPROVE_PERMISSION)
        return (
            *super().get_readonly_fields(request, obj),
            *self.REVIEW_AUDIT,
            *(("review_required",) if locked else ()),
            *(() if request.user.has_perm(SETTINGS_PERMISSION) else ("weight",)),
        )

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        was_required = change and Owner.objects.filter(pk=obj.pk, review_required=True).exists()
        services.owner_review_record(
            owner=obj, was_required=was_required, by=admin_user(request), via="admin"
        )
        super().save_model(request, obj, form, change)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The page's owners carry what they did today (`today`): one count for the page
        (dispatch.reads.committed_today), not one per row."""
        changelist = super().get_changelist_instance(request)
        page = list(changelist.result_list)  # evaluated once: the rows the page renders
        found = committed_today(owners=[owner_rules(o) for o in page], now=timezone.now())
        for owner in page:
            owner.committed = found.get(owner.pk, Committed())
        return changelist

    @admin.display(description="Today: sent / committed / limit")
    def today(self, obj: Owner) -> str:
        """Sent in the owner's local day and committed (sent + in flight + drafts not sent:
        what the dispatcher's admission counts), against the daily limit."""
        c = getattr(obj, "committed", None)
        if c is None:
            return f"- / - / {obj.daily_limit}"
        return f"{c.sent} / {c.sent + c.in_flight + c.drafts} / {obj.daily_limit}"

    @admin.display(description="Working days", ordering="working_days")
    def days(self, obj: Owner) -> str:
        return working_days_text(obj.working_days)

    def pause_scope(self, obj: Owner) -> tuple[Organization | None, Owner | None]:
        return None, obj
