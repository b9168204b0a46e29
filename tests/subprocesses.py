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


def claim_overlapping(db_name: str, ids: list[int], barrier: Any, results: Any) -> None:
    setup_django(db_name)
    from outreach.models import State
    from outreach.transitions import transition_many

    barrier.wait()
    claimed: list[int] = []
    for start in range(0, len(ids), 7):  # many small overlapping claims, as cycles would
        claimed += transition_many(
            outreach_ids=ids[start : start + 20], from_=State.QUEUED, to=State.DISPATCHED
        )
    results.put(claimed)


def run_cycles(db_name: str, seconds: float, results: Any) -> None:
    """Call dispatch_cycle in a loop as a beat+worker pair would; report when each ran."""
    setup_django(db_name)
    import time

    from orchestrator.dispatch.cycle import dispatch_cycle

    spans, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = dispatch_cycle()
        if report.ran:
            spans.append(report.held)
    results.put(spans)


def send_all(db_name: str, ids: list[int], barrier: Any, results: Any) -> None:
    """Record SENT for every id still SENDING, as racing send workers would; report the wins."""
    setup_django(db_name)
    from outreach.models import State
    from outreach.transitions import TransitionLost, transition

    barrier.wait()
    won = 0
    for outreach_id in ids:
        try:
            transition(outreach_id=outreach_id, from_=State.SENDING, to=State.SENT)
            won += 1
        except TransitionLost:
            pass
    results.put(won)


def send_one(db_name: str, outreach_id: int, smtp: tuple[str, int], barrier: Any, results: Any) -> None:
    """Run the send worker's function on one draft, as a send worker process would; report the state."""
    setup_django(db_name)
    from django.conf import settings

    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = smtp
    settings.EMAIL_USE_TLS, settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = False, "", ""
    from nurture.mail.sending import outreach_send

    barrier.wait()
    state = outreach_send(outreach_id=outreach_id)
    results.put(None if state is None else str(state.value))
