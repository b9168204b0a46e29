"""Beat's liveness: django-celery-beat's DatabaseScheduler, writing the time of each tick to a
heartbeat file.

Beat has no port to probe and `celery inspect ping` reaches workers only, so a health check
reads the last tick's age instead (`python -m config.liveness beat`). The time is beat's own
clock, written in the file (not the file's mtime, which is the filesystem's): the check compares
it with its own clock, one clock as long as both run on one host. A tick runs at least every
`beat_max_loop_interval` (5 s for this scheduler) whatever the schedule, so a file older than
a minute means a wedged or dead beat.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django_celery_beat.schedulers import DatabaseScheduler

log = logging.getLogger(__name__)


class HeartbeatScheduler(DatabaseScheduler):
    def tick(self, *args: Any, **kwargs: Any) -> float:
        delay = super().tick(*args, **kwargs)
        heartbeat = Path(settings.BEAT_HEARTBEAT_FILE)
        fresh = heartbeat.with_name(f"{heartbeat.name}.{os.getpid()}.tmp")  # one per beat process
        try:
            fresh.write_text(f"{time.time():.3f}\n")
            fresh.replace(heartbeat)  # atomic: a check never reads half a number
        except OSError as exc:  # a full or read-only disk must not stop the schedule
            log.warning("beat heartbeat not written to %s: %s", heartbeat, exc)
        return float(delay)
