"""Liveness checks for processes without an HTTP port (compose healthchecks, orchestrators).

    python -m config.liveness beat                 # the heartbeat file is fresh
    python -m config.liveness worker NODE_NAME     # the worker answers `celery inspect ping`

Exit status 0 alive, 1 not (with one line on stderr saying why). The web process has
`GET /healthz` and `GET /readyz` instead.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

BEAT_STALE_AFTER_S = 60.0


def beat_alive(*, heartbeat_file: Path, now: float, stale_after_s: float = BEAT_STALE_AFTER_S) -> str | None:
    """None when beat ticked recently, else why not. The file holds the tick's time (config.beat);
    an empty one (written by a beat from before that) counts by its mtime."""
    try:
        text = heartbeat_file.read_text().strip()
        ticked = float(text) if text else heartbeat_file.stat().st_mtime
    except FileNotFoundError:
        return f"no heartbeat file {heartbeat_file}: beat has not ticked yet"
    except ValueError:
        return f"heartbeat file {heartbeat_file} holds no time: {text[:40]!r}"
    age = now - ticked
    return None if age <= stale_after_s else f"beat's last tick was {age:.0f} s ago"


def worker_alive(*, node: str, timeout_s: float = 5.0) -> str | None:
    """None when the worker named `node` (e.g. generation@host) answers a ping."""
    from config.celery import app

    replies = app.control.ping(destination=[node], timeout=timeout_s) or []
    return None if any(node in reply for reply in replies) else f"worker {node} did not answer a ping"


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()
    from django.conf import settings

    if argv[:1] == ["beat"]:
        problem = beat_alive(heartbeat_file=Path(settings.BEAT_HEARTBEAT_FILE), now=time.time())
    elif len(argv) == 2 and argv[0] == "worker":
        problem = worker_alive(node=argv[1])
    else:
        print("usage: python -m config.liveness beat | worker NODE_NAME", file=sys.stderr)
        return 2
    if problem:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
