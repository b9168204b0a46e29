"""Writing one email: plan -> context -> message, inside the dispatcher's budget reservation.

The worker first records its intent (DISPATCHED -> GENERATING, a guarded move that a duplicate
delivery loses), then makes the LLM calls with no transaction open, then records the outcome
in a new short transaction: a draft for review, or a draft routed straight to `send`.

Generation runs on a threads pool (config.workers): hundreds of jobs per process, each waiting
seconds on the provider. Django connections are per thread, so each job uses the database only
in short turns (`database_turn`): at most GENERATION_DB_CONNECTIONS at once per process, and
the connection closed at the end of each turn, none held through the LLM calls. While the row
is GENERATING the job holds a lease (orchestrator.job_leases), so if its process dies the row
is recovered within the lease TTL instead of DISPATCH_STUCK_AFTER_S.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from config.logging import outreach_log_context
from config.queues import Queue
from nurture import llm, prompts
from nurture.errors import OptedOut, PolicyViolation, RateLimited
from nurture.intake.sequence import Gate, sequence_gate
from nurture.retry_rules import Paced, fail
from orchestrator.budget import PROVIDER, Budget, get_budget
from orchestrator.dead_letters import replay_outcome_success
from orchestrator.dispatch.inflight import call_latency_record
from orchestrator.dispatch.reads import job_scopes
from orchestrator.job_leases import job_leases
from outreach.draft_policy import check_draft
from outreach.models import Lead, Outreach, State
from outreach.tiers import Tier
from outreach.transitions import TransitionLost, transition, transition_durably

log = logging.getLogger(__name__)

PLAN_MAX_TOKENS = 200
CONTEXT_MAX_TOKENS = 250
MESSAGE_MAX_TOKENS = 500
# A nudge whose previous step is not sent yet is looked at again this much later.
SEQUENCE_RECHECK_S = 15 * 60
# A worker waits for the provider window at most this long; beyond it the job is re-queued.
MAX_PACING_WAIT_S = 5.0


@dataclass
class Usage:
    """One job's budget: the scopes its calls draw from, and what they used."""

    scopes: tuple[str, ...] = (PROVIDER,)
    requests: int = 0
    tokens: int = 0


def outreach_generate(*, outreach_id: int, budget: Budget | None = None) -> State | None:
    """Generate the draft for one dispatched outreach; return the state it ends in (None: not ours)."""
    budget = budget or get_budget()
    with database_turn():
        outreach = Outreach.objects.select_related("lead__organization", "owner").get(pk=outreach_id)
        try:
            transition(outreach_id=outreach_id, from_=State.DISPATCHED, to=State.GENERATING)
        except TransitionLost:
            log.info("generate skipped: not dispatched any more", extra=outreach_log_context(outreach))
            return None
    leases = job_leases()
    leases.take(outreach_id=outreach_id)
    try:
        return _generate(outreach=outreach, budget=budget)
    finally:
        # After the outcome is recorded: recovery must never see this row GENERATING and
        # unleased while this job still runs. (Left GENERATING by an error: recovered soon.)
        leases.drop(outreach_id=outreach_id)


def _generate(*, outreach: Outreach, budget: Budget) -> State:
    with database_turn():
        usage = Usage(scopes=job_scopes(budget=budget, reservation_id=outreach.reservation_id))
        gate = sequence_gate(outreach=outreach)
        facts = prompts.prompt_facts(outreach=outreach) if gate.go else None
    if facts is None:
        _release(budget=budget, outreach=outreach, usage=usage)
        with database_turn():
            return _hold(outreach=outreach, gate=gate)
    try:
        if outreach.lead.status == Lead.Status.OPTED_OUT:
            raise OptedOut(f"lead {outreach.lead_id} opted out")
        subject, body = _write(outreach=outreach, facts=facts, budget=budget, usage=usage)
    except OptedOut as exc:
        _release(budget=budget, outreach=outreach, usage=usage)
        with database_turn():
            transition(outreach_id=outreach.pk, from_=State.GENERATING, to=State.CANCELLED, note=str(exc))
        return State.CANCELLED
    except Exception as exc:  # classified by nurture.retry_rules; unknown errors count as transient
        _release(budget=budget, outreach=outreach, usage=usage)
        with database_turn():
            return fail(outreach=outreach, from_=State.GENERATING, exc=exc, job_type="generation")
    _release(budget=budget, outreach=outreach, usage=usage)
    with database_turn():
        return _record_draft(outreach=outreach, subject=subject, body=body, usage=usage)


_turns: tuple[int, threading.BoundedSemaphore] | None = None
_turns_lock = threading.Lock()


@contextmanager
def database_turn() -> Iterator[None]:
    """A short stretch of database work: wait for one of this process's
    GENERATION_DB_CONNECTIONS turns, and close the thread's connection at the end, so that
    200 threads waiting on the LLM hold no connection and a burst of job starts cannot open
    more than the turns. Inside a caller's transaction (tests, a shell) the connection is
    that transaction's and stays open."""
    with _process_turns():
        try:
            yield
        finally:
            if not connection.in_atomic_block:
                connection.close()


def _process_turns() -> threading.BoundedSemaphore:
    global _turns
    with _turns_lock:
        if _turns is None or _turns[0] != os.getpid():  # rebuilt in a forked child
            _turns = (os.getpid(), threading.BoundedSemaphore(settings.GENERATION_DB_CONNECTIONS))
        return _turns[1]


def _hold(*, outreach: Outreach, gate: Gate) -> State:
    """Not now (back to the queue for a while, with the reason) or never (cancelled)."""
    if gate.stop:
        transition(outreach_id=outreach.pk, from_=State.GENERATING, to=State.CANCELLED, note=gate.reason)
        return State.CANCELLED
    transition(
        outreach_id=outreach.pk,
        from_=State.GENERATING,
        to=State.QUEUED,
        note=gate.reason,
        blocked_reason=gate.reason,
        reservation_id="",
        not_before=timezone.now() + timedelta(seconds=SEQUENCE_RECHECK_S),
    )
    return State.QUEUED


def _write(
    *, outreach: Outreach, facts: prompts.PromptFacts, budget: Budget, usage: Usage
) -> tuple[str, str]:
    call = partial(_call, budget, usage=usage)
    plan = call(prompts.plan_prompt(facts=facts), PLAN_MAX_TOKENS, step="plan")
    notes = call(prompts.context_prompt(facts=facts, plan=plan), CONTEXT_MAX_TOKENS, step="context")
    organization = outreach.lead.organization
    allowed, phones = organization.allowed_link_domains, organization.allow_phone_numbers
    thread_subject = (facts.inbound or {}).get("subject", "")
    feedback: list[str] = []
    for _ in range(2):  # the first draft, and one regeneration told what was wrong
        text = call(
            prompts.message_prompt(facts=facts, plan=plan, notes=notes, policy_feedback=feedback),
            MESSAGE_MAX_TOKENS,
            step="message",
        )
        draft = prompts.draft_parse(text=text, kind=outreach.kind, thread_subject=thread_subject)
        feedback = check_draft(
            subject=draft.subject, body=draft.body, allowed_domains=allowed, allow_phone_numbers=phones
        )
        if not feedback:
            return draft.subject, draft.body
    raise PolicyViolation("draft failed the policy check twice: " + "; ".join(feedback), violations=feedback)


def _call(
    budget: Budget, messages: list[llm.ChatMessage], max_tokens: int, *, usage: Usage, step: str
) -> str:
    """One provider call, paced against the shared window (and the organization's cap, if it
    has one), its outcome reported to the budget, its duration to the dispatcher's sizing."""
    estimate = sum(len(m["content"]) for m in messages) // 4 + max_tokens
    slot = budget.acquire_call(tokens=estimate, scopes=usage.scopes)
    waited = 0.0
    while slot.wait_ms:
        if waited + slot.wait_ms / 1000 > MAX_PACING_WAIT_S:
            cause = (
                "LLM budget unavailable (Redis down, closed policy)"
                if slot.bucket == "redis"
                else (f"provider window full ({slot.bucket})")
            )
            raise Paced(wait_s=slot.wait_ms / 1000, cause=cause)
        time.sleep(slot.wait_ms / 1000)
        waited += slot.wait_ms / 1000
        slot = budget.acquire_call(tokens=estimate, scopes=usage.scopes)
    usage.requests += 1
    started = time.monotonic()
    try:
        result = llm.chat(messages=messages, max_tokens=max_tokens)
    except RateLimited as exc:
        budget.report_429(retry_after_s=exc.retry_after_s, sent_at_ms=slot.at_ms or None)
        raise
    # The provider's time only (no pacing wait): what a call holds an in-flight slot for.
    call_latency_record(step=step, seconds=time.monotonic() - started)
    info = result.rate_limits
    budget.report_provider(
        remaining_requests=info.remaining_requests,
        remaining_tokens=info.remaining_tokens,
        reset_requests_s=info.reset_requests_s,
        reset_tokens_s=info.reset_tokens_s,
        sent_at_ms=slot.at_ms or None,
        processing_ms=result.processing_ms,
    )
    usage.tokens += result.total_tokens
    return result.text


def _release(*, budget: Budget, outreach: Outreach, usage: Usage) -> None:
    """Settle the reservation with what was really used (a refund when no call was made)."""
    if not outreach.reservation_id:
        return
    if usage.requests == 0:
        budget.refund(reservation_id=outreach.reservation_id)
    else:
        budget.settle(
            reservation_id=outreach.reservation_id, actual_tokens=usage.tokens, actual_requests=usage.requests
        )


def _record_draft(*, outreach: Outreach, subject: str, body: str, usage: Usage) -> State:
    """Keep the paid-for draft: durably, so a connection that died during the LLM calls does
    not send the row back through recovery to be written (and paid for) again."""
    fields: dict[str, Any] = {
        "draft_subject": subject,
        "draft_body": body,
        "tokens_used": usage.tokens,
        "llm_calls": usage.requests,
        "reservation_id": "",
        "last_error": "",
    }
    if outreach.owner.review_required:
        transition_durably(
            outreach_id=outreach.pk, from_=State.GENERATING, to=State.AWAITING_APPROVAL, **fields
        )
        replay_outcome_success(outreach_id=outreach.pk)  # a replayed job that got this far succeeded
        return State.AWAITING_APPROVAL
    transition_durably(
        outreach_id=outreach.pk,
        from_=State.GENERATING,
        to=State.DISPATCHED,
        note="autonomous: send",
        then=lambda: enqueue_send(outreach_id=outreach.pk, reply=outreach.tier == Tier.REPLY),
        **fields,
    )
    return State.DISPATCHED


def enqueue_send(*, outreach_id: int, reply: bool = False) -> None:
    """A reply's email goes out from the reply lane too (its worker runs every task), so it does
    not wait behind a backlog of intro sends any more than its generation waited behind theirs."""
    from config.celery import app

    app.send_task("nurture.send", args=[outreach_id], queue=Queue.REPLY.value if reply else None)
