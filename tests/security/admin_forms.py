"""Helpers for posting admin forms the way a browser would: the form's own values, then changes."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.test import Client

from outreach.models import Organization
from tests.factories import logged_in, make_reviewer, make_user


def superuser_client() -> Client:
    return logged_in(make_user("root", superuser=True))


def reviewer_client(*, orgs: list[Organization], **client_options: Any) -> tuple[User, Client]:
    user = make_reviewer("reviewer", organizations=orgs)
    return user, logged_in(user, **client_options)


def form_values(client: Client, url: str) -> dict[str, Any]:
    """What the admin form at `url` would post unchanged (its initial or current values), with
    its inlines' management forms and rows, as a browser posts them."""
    context = client.get(url).context
    forms = [context["adminform"].form]
    for inline in context.get("inline_admin_formsets", []):
        forms += [inline.formset.management_form, *inline.formset.forms]
    values = {}
    for form in forms:
        for name in form.fields:
            value = form[name].value()
            if value is not None:
                values[form[name].html_name] = value
    return values


def form_errors(response: Any) -> dict[str, list[str]]:
    """The admin form's errors by field ("__all__" for the form), from a re-rendered page."""
    assert response.status_code == 200, f"expected the form back with errors, got {response.status_code}"
    form = response.context["adminform"].form
    return {name: [str(m) for m in messages] for name, messages in form.errors.items()}
