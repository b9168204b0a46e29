"""Celery adapters for the orchestrator: thin, ids only, names stable."""

from __future__ import annotations

from celery import shared_task

from orchestrator.dispatch import dispatch_cycle


@shared_task(name="orchestrator.dispatch", ignore_result=True, acks_late=False)
def dispatch() -> None:
    # acks_late off: a lost cycle is simply the next beat's cycle; redelivering it is pointless.
    dispatch_cycle()
