"""Beat's liveness: django-celery-beat's DatabaseScheduler, touching a heartbeat file each tick.

Beat has no port to probe and `celery inspect ping` reaches workers only, so a health check
reads the file's age instead (`python -m config.liveness beat`). A tick runs at least every
`beat_max_loop_interval` (5 s for this scheduler) whatever the schedule, so a file older than
a minute means a wedged or dead beat.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django_celery_beat.schedulers import DatabaseScheduler


class HeartbeatScheduler(DatabaseScheduler):
    def tick(self, *args: Any, **kwargs: Any) -> float:
        delay = super().tick(*args, **kwargs)
        Path(settings.BEAT_HEARTBEAT_FILE).touch()
        return float(delay)
