"""Celery adapters for the pipeline: ids in, one service call, no retries here.

Retries are rules applied in the database (nurture.failures sets `not_before`; the dispatcher
re-dispatches), not Celery autoretry: a retry must pass through the budget and the owner's
limits again, which only the dispatcher can grant. acks_late + reject_on_worker_lost
(settings) make a killed worker's message come back; the guarded first transition makes that
redelivery harmless.
"""

from __future__ import annotations

from celery import shared_task

from nurture.generation import outreach_generate
from nurture.sending import outreach_send


@shared_task(name="nurture.generate", ignore_result=True)
def generate(outreach_id: int) -> None:
    outreach_generate(outreach_id=int(outreach_id))


@shared_task(name="nurture.send", ignore_result=True)
def send(outreach_id: int) -> None:
    outreach_send(outreach_id=int(outreach_id))
