"""Entry points for tests that need several real processes (multiprocessing, spawn).

This module imports nothing from Django at the top: a spawned child imports it before
Django is set up, then calls `setup_django` pointing at the parent's test database.
"""

from __future__ import annotations

import os
from typing import Any


def setup_django(db_name: str) -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.test_settings")
    django.setup()
    from django.db import connections

    for alias in connections:
        connections[alias].settings_dict["NAME"] = db_name


def race_transition(db_name: str, outreach_id: int, barrier: Any, results: Any) -> None:
    setup_django(db_name)
    from outreach.models import State
    from outreach.transitions import TransitionLost, transition

    barrier.wait()
    try:
        transition(outreach_id=outreach_id, from_=State.QUEUED, to=State.DISPATCHED)
        results.put("won")
    except TransitionLost:
        results.put("lost")
