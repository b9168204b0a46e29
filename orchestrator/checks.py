"""System checks for settings whose combination matters (run by `manage.py check` and at start)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.core.mail import get_connection


@register()
def stuck_timeout_outlives_tasks(**_: Any) -> list[CheckMessage]:
    # Recovery moves in-flight work older than DISPATCH_STUCK_AFTER_S back to the queue. If that
    # is shorter than the hard task time limit, a slow but alive task is "recovered" while it
    # still runs: its outreach would be dispatched twice.
    if settings.DISPATCH_STUCK_AFTER_S > settings.CELERY_TASK_TIME_LIMIT:
        return []
    return [
        Warning(
            f"DISPATCH_STUCK_AFTER_S={settings.DISPATCH_STUCK_AFTER_S} is not above the task time limit "
            f"({settings.CELERY_TASK_TIME_LIMIT} s): live work may be recovered while it still runs.",
            hint="Set DISPATCH_STUCK_AFTER_S above 300 (the default is 600); only tests use shorter values.",
            id="orchestrator.W001",
        )
    ]


@register()
def smtp_login_over_tls(**_: Any) -> list[CheckMessage]:
    # The opt-out from TLS for an SMTP login (settings refuse it otherwise) must stay visible:
    # every process start and every `check --deploy` says the password travels in clear.
    if not getattr(settings, "EMAIL_ALLOW_PLAINTEXT_AUTH", False):
        return []
    if not (settings.EMAIL_HOST_USER and settings.EMAIL_HOST_PASSWORD):
        return []
    if settings.EMAIL_USE_TLS or settings.EMAIL_USE_SSL:
        return []
    return [
        Warning(
            f"The SMTP password for {settings.EMAIL_HOST_USER!r} is sent in clear to {settings.EMAIL_HOST} "
            "(EMAIL_ALLOW_PLAINTEXT_AUTH=1, EMAIL_USE_TLS and EMAIL_USE_SSL off).",
            hint="Use EMAIL_USE_TLS=1 (STARTTLS) or EMAIL_USE_SSL=1 unless the mail relay is on a trusted network.",
            id="orchestrator.W002",
        )
    ]


@register()
def email_backend_starts(**_: Any) -> list[CheckMessage]:
    # An email provider's backend without its API key (or Amazon SES's without boto3) would fail
    # every send as a permanent dead letter: say so at start instead. Building the backend
    # connects to nothing (SMTP connects on open, anymail on the first send).
    try:
        get_connection(fail_silently=False)
    except (ImproperlyConfigured, ImportError) as exc:
        return [
            Error(
                f"EMAIL_BACKEND={settings.EMAIL_BACKEND!r} cannot start: {exc}",
                hint="Set the ANYMAIL_<NAME> variables the provider needs (docs/email.md).",
                id="orchestrator.E001",
            )
        ]
    return []
