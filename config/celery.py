"""The Celery app: queues from config.queues, settings from Django (CELERY_ namespace).

The dispatch cycle, the only periodic entry, is CELERY_BEAT_SCHEDULE in config/settings.py;
django-celery-beat's DatabaseScheduler copies it into its tables at start (operators may then
pause it in admin). Nothing here reads settings at import: importing `config` must not freeze
them before a process (a bench, the demo) has set its environment.
"""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import celeryd_init, setup_logging

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("config")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@setup_logging.connect
def _django_logging(**_: object) -> None:
    # Workers and beat log through the project's LOGGING (structured lines), not Celery's own.
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)


@celeryd_init.connect
def _generation_database_pool(options: dict[str, object], **_: object) -> None:
    # A worker that runs generation jobs (either lane) keeps its database turns' connections
    # in a pool (nurture.generation.database_turns_pool), set before anything connects.
    from config.queues import Queue
    from nurture.generation import database_turns_pool

    queues = options.get("queues") or ()  # -Q: a list, or a comma-separated string
    names = (
        queues.split(",") if isinstance(queues, str) else queues if isinstance(queues, list | tuple) else ()
    )
    if {Queue.GENERATION.value, Queue.REPLY.value} & {str(n).strip() for n in names}:
        database_turns_pool()
