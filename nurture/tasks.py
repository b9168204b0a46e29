"""Celery adapters for the pipeline: ids in, one service call.

Retries are rules applied in the database (nurture.retry_rules sets `not_before`; the dispatcher
re-dispatches), not Celery autoretry: a retry must pass through the budget and the owner's
limits again, which only the dispatcher can grant. One exception: a job that cannot reach the
database (a failover, a restart, a proxy dropping its connections) can record nothing there, so
its message goes back to the broker to be tried again a little later (DATABASE_UNREACHABLE),
costing no attempt; once the database answers, the job's guarded first move decides as for any
redelivery. acks_late + reject_on_worker_lost
(settings) make a killed worker's message come back (for a whole killed worker, only after the
broker's visibility timeout: its GENERATING rows come back sooner through their job leases,
orchestrator.failures.leases); the guarded first transition makes any late redelivery harmless.

A job is leased from the moment the worker receives its message (`_lease_from_receipt`, in the
worker's main process for prefork and threads pools alike) until the message is acknowledged
or rejected, so jobs a dead worker had taken but not begun come back within the lease TTL too;
a worker that stops cleanly releases them, their messages being back in the broker.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from celery.signals import task_received, worker_shutdown
from django.db import InterfaceError, OperationalError

from nurture.intake import tasks as intake_tasks  # noqa: F401  (registers nurture.intake_chunk)
from nurture.mail.sending import outreach_send
from nurture.writing.generation import outreach_generate
from orchestrator import work

# Back to the broker while the database cannot be reached: tried again after 1, 2, 4 ... 30 s
# (with jitter, so a worker's jobs do not all return at once), for as long as it takes.
DATABASE_UNREACHABLE: dict[str, Any] = {
    "autoretry_for": (OperationalError, InterfaceError),
    "retry_backoff": 1,
    "retry_backoff_max": 30,
    "retry_jitter": True,
    "max_retries": None,
}


@shared_task(name="nurture.generate", ignore_result=True, **DATABASE_UNREACHABLE)
def generate(outreach_id: int) -> None:
    outreach_generate(outreach_id=int(outreach_id))


@shared_task(name="nurture.generate_reply", ignore_result=True, **DATABASE_UNREACHABLE)
def generate_reply(outreach_id: int) -> None:
    """The same job as `generate`, routed to the reply lane (config.queues.Queue.REPLY)."""
    outreach_generate(outreach_id=int(outreach_id))


@shared_task(name="nurture.send", ignore_result=True, **DATABASE_UNREACHABLE)
def send(outreach_id: int) -> None:
    outreach_send(outreach_id=int(outreach_id))


# The jobs that hold a DISPATCHED row while their message is in a worker: their first argument
# is the outreach id.
LEASED_FROM_RECEIPT = frozenset({"nurture.generate", "nurture.generate_reply", "nurture.send"})


@task_received.connect
def _lease_from_receipt(request: Any, **_: object) -> None:
    """Sent by the worker's main process as a message arrives (before it waits for a pool slot)."""
    if request.name not in LEASED_FROM_RECEIPT or not request.args:
        return
    work.job_leases().receive(outreach_id=int(request.args[0]), unsettled=lambda: not request.acknowledged)


@worker_shutdown.connect
def _release_receipts(**_: object) -> None:
    """The worker stopped cleanly: what it received and did not settle is back in the broker."""
    work.job_leases().release_received()
