"""System checks for settings whose combination matters (run by `manage.py check` and at start)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning, register


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
