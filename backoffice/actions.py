"""Operators' actions in the admin (docs/operators.md, "Actions"): cancel, retry now, reassign
(on Outreach) and reject with a reason (on the approval queue). Each needs its own permission
(outreach.cancel_outreach, retry_outreach, reassign_outreach, reject_outreach), calls one
service of outreach.services.operations per row, and reports per row what it did and skipped.

Tenancy: an action gets the rows the admin's get_queryset (OrganizationScopedAdmin) lists to
the user, so a forged id of another organization's row is not acted on; it is reported as
"not in your organizations". Actions that need an answer first (to whom, why) show
admin/action_form.html, which posts back with `apply`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from nurture import review
from nurture.intake.triage.reclassify import reply_reclassify
from outreach.models import Organization, Outreach, Owner, ReplyClass
from outreach.services import operations
from outreach.services.operations import Row


def admin_user(request: HttpRequest) -> AbstractBaseUser:
    """The user acting in an admin view (for services that record who did it)."""
    # Admin views only run for authenticated staff; the permission check already passed.
    assert isinstance(request.user, AbstractBaseUser)
    return request.user


def run_and_report(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Row],
    *,
    verb: str,
    service: Callable[[Row], object],
) -> None:
    """Run `service` on each row the admin handed over and tell the operator what happened to
    every row they selected, including ids it did not hand over (another organization's, or
    no longer listed). The rows are read once, before acting: acting can take them out of the
    admin's list (a rejected draft leaves the approval queue)."""
    rows = list(queryset)
    done = operations.apply_each(rows=rows, verb=verb, service=service)
    given = {str(row.pk) for row in rows}
    missing = sorted(
        set(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)) - given, key=lambda pk: (len(pk), pk)
    )
    done.skipped.extend(f"#{pk} is not in your organizations" for pk in missing)
    modeladmin.message_user(request, done.message(), messages.WARNING if done.skipped else messages.SUCCESS)


def action_form_page(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Any],
    *,
    form: forms.Form,
    title: str,
    intro: str,
    submit: str,
) -> TemplateResponse:
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": title,
        "intro": intro,
        "submit": submit,
        "form": form,
        "media": modeladmin.media + form.media,
        "queryset": queryset,
        "opts": modeladmin.model._meta,
        "action": request.POST.get("action", ""),
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
    }
    return TemplateResponse(request, "admin/action_form.html", context)


class ReassignForm(forms.Form):
    owner = forms.ModelChoiceField(
        queryset=Owner.objects.none(),
        label="New owner",
        error_messages={
            "invalid_choice": "Choose one of the owners listed: only owners of this organization may take its work."
        },
    )

    def __init__(self, *args: Any, owners: QuerySet[Owner], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["owner"].queryset = owners  # type: ignore[attr-defined]


class RejectForm(forms.Form):
    reason = forms.CharField(
        max_length=200,
        help_text="Kept on each draft, shown in its history and counted on the queue-health dashboard.",
    )


class ReclassifyForm(forms.Form):
    reply_class = forms.ChoiceField(
        choices=ReplyClass.choices,
        label="New class",
        help_text="Recorded in each reply's history with your name; the class's action runs where it still can.",
    )


class ReclassifyAction(admin.ModelAdmin):
    """The "reclassify" action on replies (outreach list, approval queue), behind
    outreach.reclassify_outreach: ask for the class, then nurture.intake.triage.reclassify."""

    def has_reclassify_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("outreach.reclassify_outreach")

    @admin.action(description="Reclassify selected replies", permissions=["reclassify"])
    def reclassify_selected(
        self, request: HttpRequest, queryset: QuerySet[Outreach]
    ) -> TemplateResponse | None:
        return ask_then_run(
            self,
            request,
            queryset,
            form_class=ReclassifyForm,
            page=(
                "Reclassify replies",
                "Give the selected replies another class. A reply the new class does not answer is "
                "cancelled if not sent yet; the class's action on the lead runs too.",
                "Reclassify",
            ),
            verb="reclassified",
            service=lambda o, by, answer: reply_reclassify(
                outreach_id=o.pk, reply_class=answer["reply_class"], by_id=by.pk
            ),
        )


class OutreachActions(ReclassifyAction):
    """The operators' actions of OutreachAdmin, each behind its own permission."""

    actions = ("cancel_selected", "retry_now_selected", "reassign_selected", "reclassify_selected")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("outreach.cancel_outreach")

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("outreach.retry_outreach")

    def has_reassign_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("outreach.reassign_outreach")

    @admin.action(description="Cancel selected outreach", permissions=["cancel"])
    def cancel_selected(self, request: HttpRequest, queryset: QuerySet[Outreach]) -> None:
        by = admin_user(request)
        run_and_report(
            self,
            request,
            queryset,
            verb="cancelled",
            service=lambda o: operations.outreach_cancel(outreach=o, by=by),
        )

    @admin.action(description="Retry selected outreach now", permissions=["retry"])
    def retry_now_selected(self, request: HttpRequest, queryset: QuerySet[Outreach]) -> None:
        by = admin_user(request)
        run_and_report(
            self,
            request,
            queryset,
            verb="due now (the next dispatch cycle takes them)",
            service=lambda o: operations.outreach_retry_now(outreach=o, by=by),
        )

    @admin.action(description="Reassign selected outreach to another owner", permissions=["reassign"])
    def reassign_selected(
        self, request: HttpRequest, queryset: QuerySet[Outreach]
    ) -> TemplateResponse | None:
        organizations = set(queryset.values_list("owner__organization", flat=True))
        if len(organizations) != 1:
            self.message_user(
                request,
                "Reassign the work of one organization at a time: the selection spans several."
                if organizations
                else "Nothing selected is in your organizations.",
                messages.ERROR,
            )
            return None
        organization = Organization.objects.get(pk=organizations.pop())
        owners = Owner.objects.filter(organization=organization, active=True).order_by("name")
        form = ReassignForm(request.POST if "apply" in request.POST else None, owners=owners)
        if not form.is_valid():
            return action_form_page(
                self,
                request,
                queryset,
                form=form,
                title="Reassign outreach",
                intro=f"Give the selected outreach to another owner of {organization}. "
                "Work in flight, dead, sent or finished is skipped.",
                submit="Reassign",
            )
        by, to = admin_user(request), form.cleaned_data["owner"]
        run_and_report(
            self,
            request,
            queryset.select_related("owner__organization"),
            verb=f"reassigned to {to.name}",
            service=lambda o: operations.outreach_reassign(outreach=o, to=to, by=by),
        )
        return None


def ask_then_run(
    modeladmin: admin.ModelAdmin,
    request: HttpRequest,
    queryset: QuerySet[Row],
    *,
    form_class: type[forms.Form],
    page: tuple[str, str, str],
    verb: str,
    service: Callable[[Row, AbstractBaseUser, dict[str, Any]], object],
) -> TemplateResponse | None:
    """An action that needs an answer first (why): show `form_class` on the action page
    (`page`: title, intro, submit label) until it is valid, then run `service(row, user,
    answer)` on each row and report per row."""
    form = form_class(request.POST if "apply" in request.POST else None)
    if not form.is_valid():
        title, intro, submit = page
        return action_form_page(
            modeladmin, request, queryset, form=form, title=title, intro=intro, submit=submit
        )
    by, answer = admin_user(request), form.cleaned_data
    run_and_report(modeladmin, request, queryset, verb=verb, service=lambda row: service(row, by, answer))
    return None


def reject_with_reason(
    modeladmin: admin.ModelAdmin, request: HttpRequest, queryset: QuerySet[Outreach]
) -> TemplateResponse | None:
    """The approval queue's bulk reject: ask why, then reject each draft with that reason."""
    return ask_then_run(
        modeladmin,
        request,
        queryset,
        form_class=RejectForm,
        page=(
            "Reject drafts",
            "Reject the selected drafts. Nothing is sent; the reason is kept with each.",
            "Reject",
        ),
        verb="rejected",
        service=lambda o, by, answer: review.draft_reject(outreach=o, by=by, reason=answer["reason"]),
    )
