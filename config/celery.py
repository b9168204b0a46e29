"""The Celery app: queues from config.queues, settings from Django (CELERY_ namespace).

The dispatch cycle is the only periodic entry; it lives here, once, and django-celery-beat's
DatabaseScheduler copies it into its tables at start (operators may then pause it in admin).
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import setup_logging
from kombu import Queue as KombuQueue

from config.queues import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = [KombuQueue(q.value, routing_key=q.value) for q in Queue]
app.autodiscover_tasks()


def _dispatch_schedule() -> dict[str, dict[str, object]]:
    from django.conf import settings

    interval = float(settings.DISPATCH_INTERVAL)
    return {
        "dispatch-cycle": {
            "task": "orchestrator.dispatch",
            "schedule": interval,
            # A cycle message older than one interval is useless (the next one is coming):
            # let it expire rather than pile up behind a stopped orchestrator worker.
            "options": {"queue": Queue.ORCHESTRATOR.value, "expires": max(interval, 1.0)},
        }
    }


app.conf.beat_schedule = _dispatch_schedule()


@setup_logging.connect
def _django_logging(**_: object) -> None:
    # Workers and beat log through the project's LOGGING (structured lines), not Celery's own.
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
