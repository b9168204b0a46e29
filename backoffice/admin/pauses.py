"""Pausing and resuming from the admin (docs/operators.md, "Pause and resume"): the Pause admin
(active and past pauses, an add form, "Resume selected"), and "Pause" / "Resume" actions on the
organization and owner lists. All call orchestrator.controls.pauses.

Permissions: orchestrator.add_pause to pause, orchestrator.change_pause to resume. Tenancy: a
pause is its organization's (an owner's pause names the owner's organization too), so the
Pause admin lists, and resumes, only pauses of the user's organizations; a global pause (no
organization: a tier everywhere, a sender domain everywhere) stops every tenant, so only
superusers see or set one.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from backoffice.actions import action_form_page, admin_user
from backoffice.tenancy import OrganizationScopedAdmin
from orchestrator.controls import pauses
from orchestrator.models import Pause
from outreach.models import Organization, Owner
from outreach.tiers import Tier

PAUSE_PERMISSION = "orchestrator.add_pause"
RESUME_PERMISSION = "orchestrator.change_pause"
TIER_CHOICES = [("", "all tiers"), *((str(t.value), t.name.lower()) for t in Tier)]


class PauseForm(forms.ModelForm):
    """What to pause. The admin passes `may_pause_globally` (superusers only)."""

    class Meta:
        model = Pause
        fields = ("organization", "owner", "tier", "sender_domain", "reason")

    may_pause_globally = False

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        if self.instance.pk is not None:
            return data  # a stored pause is read-only: nothing to check, nothing saved
        organization, owner = data.get("organization"), data.get("owner")
        if owner is not None and organization is not None and owner.organization_id != organization.pk:
            self.add_error(
                "owner", f"{owner.name} is an owner of {owner.organization}, not of {organization}."
            )
        if organization is None and owner is None and not self.may_pause_globally:
            self.add_error(
                "organization",
                "Choose an organization (or an owner): a pause of a tier or sender domain "
                "everywhere stops every organization, and only a superuser may set one.",
            )
        if not any(data.get(f) not in (None, "") for f in ("organization", "owner", "tier", "sender_domain")):
            self.add_error(None, "Say what to pause: an organization, an owner, a tier or a sender domain.")
        return data


@admin.register(Pause)
class PauseAdmin(OrganizationScopedAdmin):
    """Active and past pauses; a global one (no organization) is listed to superusers only,
    as OrganizationScopedAdmin's join on the organization's members leaves it out for others."""

    form = PauseForm
    list_display = (
        "scope",
        "active",
        "source",
        "reason",
        "created_by",
        "created_at",
        "resumed_by",
        "resumed_at",
    )
    list_filter = (("resumed_at", admin.EmptyFieldListFilter), "source", "tier", "organization")
    list_select_related = ("organization", "owner", "created_by", "resumed_by")
    search_fields = ("reason", "sender_domain", "owner__name", "organization__name")
    actions = ("resume_selected",)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        return type(form.__name__, (form,), {"may_pause_globally": request.user.is_superuser})

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # A pause is a record of who stopped what and when: lifted, never edited.
        return [f.name for f in Pause._meta.fields] if obj is not None else []

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # kept as history; "Resume selected" lifts it

    @admin.display(description="Scope")
    def scope(self, obj: Pause) -> str:
        return obj.scope_text()

    @admin.display(description="Active", boolean=True)
    def active(self, obj: Pause) -> bool:
        return obj.resumed_at is None

    def save_model(self, request: HttpRequest, obj: Pause, form: Any, change: bool) -> None:
        # Through the service, which keeps one active pause per scope: pausing a scope already
        # paused shows that pause rather than a second one. A stored pause is never re-saved
        # (saving a past one's page must not pause its scope again).
        if change:
            return
        paused, created = pauses.pause(
            organization=obj.organization,
            owner=obj.owner,
            tier=None if obj.tier is None else Tier(obj.tier),
            sender_domain=obj.sender_domain,
            by=admin_user(request),
            reason=obj.reason,
        )
        obj.pk, obj.created_at, obj.created_by_id = paused.pk, paused.created_at, paused.created_by_id
        if not created:
            self.message_user(
                request,
                f"{paused.scope_text()} was already paused: {paused.blocked_reason()}",
                messages.WARNING,
            )

    @admin.action(description="Resume selected pauses", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Pause]) -> None:
        rows = list(queryset.select_related("organization", "owner"))
        lifted = pauses.resume(pauses=rows, by=admin_user(request))
        already = [p.scope_text() for p in rows if p.resumed_at is not None]
        text = f"{lifted} pause(s) resumed: waiting work goes at the next dispatch cycle"
        if already:
            text += f"; {len(already)} skipped: already resumed ({'; '.join(already)})"
        self.message_user(request, text + ".", messages.WARNING if already else messages.SUCCESS)


class PauseReasonForm(forms.Form):
    tier = forms.TypedChoiceField(
        choices=TIER_CHOICES,
        required=False,
        coerce=int,
        empty_value=None,
        help_text="Pause one tier only, or all of the work.",
    )
    reason = forms.CharField(
        max_length=300, required=False, help_text="Shown on the waiting work and on the dashboard."
    )


class PauseActions(admin.ModelAdmin):
    """ "Pause" and "Resume" on a list of organizations or owners (`pause_scope` says which)."""

    actions = ("pause_selected", "resume_pauses_selected")

    def pause_scope(self, obj: Any) -> tuple[Organization | None, Owner | None]:
        """(organization, owner) a pause of this row names."""
        raise NotImplementedError

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(PAUSE_PERMISSION)

    def has_resume_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(RESUME_PERMISSION)

    @admin.action(description="Pause selected", permissions=["pause"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> TemplateResponse | None:
        form = PauseReasonForm(request.POST if "apply" in request.POST else None)
        if not form.is_valid():
            return action_form_page(
                self,
                request,
                queryset,
                form=form,
                title="Pause",
                intro="Their queued work waits, saying who paused it and why, until resumed; "
                "approved drafts are not sent; work mid-call finishes.",
                submit="Pause",
            )
        tier = form.cleaned_data["tier"]
        done: list[str] = []
        already: list[str] = []
        for obj in queryset:
            organization, owner = self.pause_scope(obj)
            paused, created = pauses.pause(
                organization=organization,
                owner=owner,
                tier=None if tier is None else Tier(tier),
                by=admin_user(request),
                reason=form.cleaned_data["reason"],
            )
            (done if created else already).append(paused.scope_text())
        text = f"{len(done)} paused" + (f" ({'; '.join(done)})" if done else "")
        if already:
            text += f"; {len(already)} skipped: already paused ({'; '.join(already)})"
        self.message_user(request, text + ".", messages.WARNING if already else messages.SUCCESS)
        return None

    @admin.action(description="Resume selected", permissions=["resume"])
    def resume_pauses_selected(self, request: HttpRequest, queryset: QuerySet[Any]) -> None:
        lifted: list[str] = []
        idle: list[str] = []
        for obj in queryset:
            organization, owner = self.pause_scope(obj)
            found = pauses.active_of(organization=organization, owner=owner)
            if not found:
                idle.append(str(obj))
                continue
            pauses.resume(pauses=found, by=admin_user(request))
            lifted.extend(p.scope_text() for p in found)
        text = f"{len(lifted)} pause(s) resumed" + (f" ({'; '.join(lifted)})" if lifted else "")
        if idle:
            text += f"; {len(idle)} skipped: not paused ({'; '.join(idle)})"
        self.message_user(request, text + ".", messages.WARNING if idle else messages.SUCCESS)
