"""python manage.py demo [--for SECONDS]: the one-command main job on the embedded defaults.

Migrates, creates the demo login, seeds a demo organization, then runs the web server, one
Celery worker per queue, beat and Flower until Ctrl-C (or --for SECONDS), and stops them all.
"""

from __future__ import annotations

import signal
import time
from datetime import time as dtime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser

from config.processes import ProcessGroup, celery_beat, celery_worker, flower, web
from config.queues import Queue
from outreach.services import OwnerSpec, owner_upsert

DEMO_OWNERS = [
    OwnerSpec(
        "Atlas (agent)", "agent", 400, dtime(0, 0), dtime(23, 59), "UTC", working_days="1234567", weight=2
    ),
    OwnerSpec(
        "Nova (agent)", "agent", 300, dtime(6, 0), dtime(22, 0), "America/New_York", working_days="1234567"
    ),
    OwnerSpec(
        "Maria (seller)", "human", 60, dtime(9, 0), dtime(17, 0), "Europe/Berlin", review_required=True
    ),
    OwnerSpec("Kenji (seller)", "human", 40, dtime(9, 0), dtime(18, 0), "Asia/Tokyo", review_required=True),
]


class Command(BaseCommand):
    help = "Run the demo: web, workers per queue, beat and Flower on the embedded defaults."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--for", dest="seconds", type=float, default=None, help="Stop after this many seconds."
        )
        parser.add_argument("--web-port", type=int, default=8000)
        parser.add_argument("--flower-port", type=int, default=5555)

    def handle(self, *args: Any, **opts: Any) -> None:
        if not settings.DEBUG:
            raise CommandError("The demo runs with DJANGO_DEBUG=1 (demo secrets); scripts/demo.sh sets it.")
        call_command("migrate", verbosity=0)
        self._seed()
        group = ProcessGroup(log_dir=Path(settings.BASE_DIR) / "var" / "logs")
        try:
            self._start(group, opts)
            self._wait(group, opts["seconds"])
        finally:
            self.stdout.write("Stopping every process the demo started...")
            group.stop()
            self.stdout.write(self.style.SUCCESS("Demo stopped."))

    def _seed(self) -> None:
        if not User.objects.filter(username="admin").exists():
            User.objects.create_superuser("admin", "admin@example.com", "admin")
        for spec in DEMO_OWNERS:
            owner_upsert(spec=spec)

    def _start(self, group: ProcessGroup, opts: dict[str, Any]) -> None:
        group.start("web", web(port=opts["web_port"]))
        for queue in Queue:
            group.start(f"worker-{queue.value}", celery_worker(queue))
        group.start("beat", celery_beat())
        group.start("flower", flower(port=opts["flower_port"], basic_auth=settings.FLOWER_BASIC_AUTH))
        self.stdout.write(
            self.style.SUCCESS("Demo running.")
            + f"\n  admin:  http://127.0.0.1:{opts['web_port']}/admin/  (login admin / admin)"
            + f"\n  flower: http://127.0.0.1:{opts['flower_port']}/  (login {settings.FLOWER_BASIC_AUTH.replace(':', ' / ')})"
            + f"\n  logs:   {group.log_dir}\nPress Ctrl-C to stop."
        )

    def _wait(self, group: ProcessGroup, seconds: float | None) -> None:
        deadline = None if seconds is None else time.monotonic() + seconds
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        try:
            while deadline is None or time.monotonic() < deadline:
                if dead := group.dead():
                    raise CommandError(f"{', '.join(dead)} exited early; see {group.log_dir}.")
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
