"""The Celery adapter of intake: a lead file's children loaded in chunks on the orchestrator
workers (docs/operators.md). Registered with the pipeline's tasks (nurture.tasks imports it)."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

from celery import shared_task
from django.db import OperationalError, transaction

from nurture.intake.assignment import assignment_chunk_process, assignment_chunks


@shared_task(
    name="nurture.intake_chunk",
    ignore_result=True,
    # A dropped connection or a deadlock with a concurrent run passes on a retry; the chunk is
    # idempotent (it only touches children still PENDING), so a retry cannot double-load.
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    max_retries=5,
)
def intake_chunk(batch_id: int, first_id: int, last_id: int) -> None:
    assignment_chunk_process(batch_id=int(batch_id), first_id=int(first_id), last_id=int(last_id))


def intake_enqueue(*, batch_id: int, child_ids: Sequence[int]) -> None:
    """Hand a batch's children to the orchestrator workers, one intake_chunk per chunk: ids only
    (no lead data on the broker), published once the children are committed."""
    for first_id, last_id in assignment_chunks(child_ids=child_ids):
        transaction.on_commit(partial(intake_chunk.delay, batch_id, first_id, last_id))
