"""Celery adapters for the orchestrator: thin, ids only, names stable."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.metrics.budget_use import budget_sample_record

log = logging.getLogger(__name__)


@shared_task(name="orchestrator.dispatch", ignore_result=True, acks_late=False)
def dispatch() -> None:
    # acks_late off: a lost cycle is simply the next beat's cycle; redelivering it is pointless.
    dispatch_cycle()
    budget_sample_record()  # the budget chart: one row a minute, cluster-wide


@shared_task(name="orchestrator.prune", ignore_result=True, acks_late=False)
def prune() -> None:
    """Retention (orchestrator.controls.retention). A run deletes for about one dispatch interval; while
    rows remain it queues the next run, so dispatch cycles get the worker in between."""
    # acks_late off: a run lost with its worker leaves rows for the next run, which deletes them.
    from orchestrator.controls.retention import retention_prune

    report = retention_prune()
    log.info("retention prune: %s", report.deleted, extra={"finished": report.finished})
    if not report.finished:
        prune.apply_async(countdown=settings.DISPATCH_INTERVAL)


@shared_task(name="orchestrator.expire_drafts", ignore_result=True, acks_late=False)
def expire_drafts() -> None:
    """Draft expiry (orchestrator.controls.draft_expiry): drafts awaiting approval past their organization's age."""
    # acks_late off: a run lost with its worker leaves the drafts for the next run.
    from orchestrator.controls.draft_expiry import drafts_expire

    expired = drafts_expire(now=timezone.now())
    if expired:
        log.info("drafts expired: %s", expired, extra={"expired_by_organization": expired})


@shared_task(name="orchestrator.alerts_check", ignore_result=True, acks_late=False)
def alerts_check() -> None:
    """Beat entry `alerts-check` (orchestrator.metrics.alerts). A lost check is the next tick's check."""
    from orchestrator.metrics.alerts import alerts_check as check

    notified = check()
    if notified:
        log.info("alerts notified: %s", ", ".join(notified), extra={"alerts": notified})


@shared_task(name="dead_letter.alert", ignore_result=True)
def dead_letter_alert(dead_letter_id: int) -> None:
    """Off the hot queues: tell operators a job died (one ERROR line with ids and the action)."""
    from orchestrator.models import DeadLetter

    letter = DeadLetter.objects.filter(pk=dead_letter_id).first()
    if letter is None:
        return
    log.error(
        "dead letter: outreach %s (%s) failed as %s: %s. Suggested: %s",
        letter.outreach_id,
        letter.job_type,
        letter.failure_class,
        letter.reason[:300],
        letter.suggested_action,
        extra={
            "dead_letter_id": letter.pk,
            "outreach_id": letter.outreach_id,
            "owner_id": letter.owner_id_ref,
            "failure_class": letter.failure_class,
        },
    )
