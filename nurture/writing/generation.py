"""Writing one email: plan -> context -> message, inside the dispatcher's budget reservation.

The worker first records its intent (DISPATCHED -> GENERATING, a guarded move that a duplicate
delivery loses), then makes the LLM calls with no transaction open, then records the outcome
in a new short transaction: a draft for review, or a draft routed straight to `send`.

Generation runs on a threads pool (config.workers): hundreds of jobs per process, each waiting
seconds on the provider. Django connections are per thread, so each job uses the database only
in short turns (`database_turn`): at most GENERATION_DB_CONNECTIONS at once per process, the
connection given back at the end of each turn, none held through the LLM calls. A worker that
runs generation jobs keeps those connections in a pool (config.celery, set up when it starts),
so a turn reuses one instead of starting a PostgreSQL backend. While the row
is GENERATING the job holds a lease (orchestrator.failures.leases), so if its process dies the row
is recovered within the lease TTL instead of DISPATCH_STUCK_AFTER_S.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection
from django.db.models import Q
from django.utils import timezone

from config import shutdown, tracing
from config.deployments import Deployment
from config.logging import outreach_log_context
from config.queues import Queue
from nurture.errors import (
    ConfigurationFault,
    HandedBack,
    OptedOut,
    Paced,
    PermanentError,
    PolicyViolation,
    RateLimited,
    TransientError,
)
from nurture.quiet import reply_due, reply_quiet_s
from nurture.reply_actions import (
    reply_answered,
    reply_class_act,
    reply_class_record,
    reply_class_reopened,
    reply_needs_person,
)
from nurture.retry_rules import fail
from nurture.sequence import Gate, sequence_gate
from nurture.writing import llm, prompts, triage
from nurture.writing.draft_policy import check_draft
from orchestrator import work
from orchestrator.work import Budget, JobBudget
from outreach.counters import call_durations_record
from outreach.models import SUPPRESSED, Outreach, Prepared, State, TriageBy
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


# The job's outreach with what writing it reads (its SQL compiled once: outreach.models.prepared)
_LOAD = Prepared(
    lambda pk: Outreach.objects.select_related("lead__organization", "owner__organization").filter(pk=pk)
)


def outreach_generate(*, outreach_id: int, budget: Budget | None = None) -> State | None:
    """Generate the draft for one dispatched outreach; return the state it ends in (None: not ours)."""
    budget = budget or work.get_budget()
    with database_turn():
        outreach = _LOAD.get(pk=outreach_id)
        stop = work.job_pause(outreach=outreach)
        if stop is None:
            try:
                transition(outreach_id=outreach_id, from_=State.DISPATCHED, to=State.GENERATING)
            except TransitionLost:
                log.info("generate skipped: not dispatched any more", extra=outreach_log_context(outreach))
                return None
    if stop is not None:
        return _put_back(outreach=outreach, budget=budget, note="paused", reason=stop.blocked_reason())
    leases = work.job_leases()
    leases.take(outreach_id=outreach_id)
    try:
        return _generate(outreach=outreach, budget=budget)
    except (OperationalError, InterfaceError):
        # The database dropped the job's connection (a failover, a restart, a proxy) before its
        # outcome was recorded: not the job's failure, so no attempt is charged. Still
        # unreachable: the task goes back to the broker (nurture.tasks), and recovery has the row.
        return _put_back(
            outreach=outreach,
            budget=budget,
            note="database connection lost: back to the queue, no attempt charged",
            reason="",
            from_=State.GENERATING,
        )
    finally:
        # After the outcome is recorded: recovery must never see this row GENERATING and
        # unleased while this job still runs. (Left GENERATING by an error: recovered soon.)
        leases.drop(outreach_id=outreach_id)


def _put_back(
    *, outreach: Outreach, budget: Budget, note: str, reason: str, from_: State = State.DISPATCHED
) -> State | None:
    """Back to the queue, the reservation refunded (what was settled already stays settled)
    and no attempt charged: paused after dispatch (`reason`: the pause's), or the database lost
    mid-job (from GENERATING, recorded on a fresh connection). None: another delivery or
    recovery had the row."""
    with database_turn():  # one turn: the move, then the caps the reservations name
        try:
            transition_durably(
                outreach_id=outreach.pk,
                from_=from_,
                to=State.QUEUED,
                note=note,
                blocked_reason=reason,
                reservation_id="",
            )
        except TransitionLost:
            return None
        rids = work.reservations_known(budget=budget, outreach=outreach)
    for rid in rids:  # what was settled already stays settled
        budget.refund(reservation_id=rid)
    log.info("generate put back: %s", note, extra=outreach_log_context(outreach))
    return State.QUEUED


def _generate(*, outreach: Outreach, budget: Budget) -> State | None:
    with database_turn():
        usage = work.job_budget(budget=budget, outreach=outreach)
        gate = sequence_gate(outreach=outreach)
        facts = prompts.prompt_facts(outreach=outreach) if gate.go else None
    if facts is None:
        work.job_settle(budget=budget, usage=usage)
        with database_turn():
            return _hold(outreach=outreach, gate=gate)
    try:
        if outreach.lead.status in SUPPRESSED:
            raise OptedOut(f"lead {outreach.lead_id} {outreach.lead.status}: nothing is sent to it")
        if outreach.kind == Outreach.Kind.REPLY and not outreach.reply_class:
            not_answered = _triage(outreach=outreach, facts=facts, budget=budget, usage=usage)
            if not_answered is not None:
                raise NotAnswered(not_answered)
            facts = dataclasses.replace(facts, reply_class=outreach.reply_class)
        subject, body = _write(outreach=outreach, facts=facts, budget=budget, usage=usage)
    except HandedBack as exc:  # its worker is stopping: what the calls cost stays settled
        work.job_settle(budget=budget, usage=usage)
        with database_turn():
            call_durations_record(usage.call_durations)
        return _put_back(outreach=outreach, budget=budget, note=str(exc), reason="", from_=State.GENERATING)
    except NotAnswered as exc:
        # The triage call was made and is settled; not learned as a job (owner_tokens): no draft.
        # Guarded like a draft: a message that joined during the call was not classified, so
        # the turn is classified again with it rather than cancelled on the class before it.
        work.job_settle(budget=budget, usage=usage)
        with database_turn():
            call_durations_record(usage.call_durations)
            try:
                transition(
                    outreach_id=outreach.pk,
                    from_=State.GENERATING,
                    to=State.CANCELLED,
                    note=str(exc),
                    guard=Q(inbound_joined=outreach.inbound_joined),
                    **_spent(usage),
                )
            except TransitionLost:
                return _rewrite_joined(outreach=outreach)
        return State.CANCELLED
    except OptedOut as exc:
        work.job_settle(budget=budget, usage=usage)
        with database_turn():
            call_durations_record(usage.call_durations)
            transition(outreach_id=outreach.pk, from_=State.GENERATING, to=State.CANCELLED, note=str(exc))
        return State.CANCELLED
    except Exception as exc:  # classified by nurture.retry_rules; unknown errors count as transient
        # A misconfigured deployment's refusals are not the job's spending: all given back.
        work.job_settle(budget=budget, usage=usage, refund=isinstance(exc, ConfigurationFault))
        with database_turn():
            call_durations_record(usage.call_durations)
            return fail(outreach=outreach, from_=State.GENERATING, exc=exc, job_type="generation")
    work.job_settle(budget=budget, usage=usage)
    # A whole job's usage only; what it used and what the limit counted (owner_tokens says why both).
    work.owner_tokens_record(
        owner_id=outreach.owner_id, settled=usage.tokens, counted=usage.counted, kind=outreach.kind
    )
    with database_turn():
        call_durations_record(usage.call_durations)
        return _record_draft(outreach=outreach, subject=subject, body=body, usage=usage)


_turns: tuple[int, threading.BoundedSemaphore] | None = None
_turns_lock = threading.Lock()


@contextmanager
def database_turn() -> Iterator[None]:
    """A short stretch of database work: wait for one of this process's
    GENERATION_DB_CONNECTIONS turns, and give the thread's connection back at the end (to the
    pool, or closed where there is none), so that 200 threads waiting on the LLM hold no
    connection and a burst of job starts cannot use more than the turns. Inside a caller's
    transaction (tests, a shell) the connection is that transaction's and stays open."""
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


class NotAnswered(Exception):
    """The model's triage put the reply in a class that gets no answer (its action is done)."""

    def __init__(self, note: str) -> None:
        super().__init__(note)


def _triage(
    *, outreach: Outreach, facts: prompts.PromptFacts, budget: Budget, usage: JobBudget
) -> str | None:
    """The reply's one classification call (nurture.writing.triage), its class recorded and
    acted on (nurture.reply_actions). None: the reply is answered (`outreach.reply_class` set
    for `_record_draft` to route it); else the note of what was done instead."""
    today = timezone.now().date()
    text = _call(
        budget,
        triage.triage_prompt(facts=facts, today=today),
        triage.TRIAGE_MAX_TOKENS,
        usage=usage,
        step="triage",
    )
    found = triage.triage_parse(text=text, today=today)
    with database_turn():
        reply_class_record(outreach_id=outreach.pk, triage=found, by=TriageBy.MODEL)
        outreach.reply_class = found.reply_class
        done = reply_class_act(reply=outreach, triage=found, sequence_stopped=True)
    if reply_answered(reply_class=found.reply_class, organization=outreach.lead.organization):
        return None
    return f"{found.reply_class} (model): not answered; {done}"[:500]


def _spent(usage: JobBudget) -> dict[str, Any]:
    """What the job's calls used, kept on the row however it ends (a draft, or no answer)."""
    return {
        "tokens_used": usage.tokens,
        "llm_calls": usage.requests,
        "llm_input_tokens": usage.input_tokens,
        "llm_output_tokens": usage.output_tokens,
        "llm_cost": usage.cost(prices=settings.LLM_PRICES),
        "reservation_id": "",
    }


def _write(
    *, outreach: Outreach, facts: prompts.PromptFacts, budget: Budget, usage: JobBudget
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
    budget: Budget, messages: list[llm.ChatMessage], max_tokens: int, *, usage: JobBudget, step: str
) -> str:
    """One provider call on the step's deployment, paced against its window (and the
    organization's cap, if it has one), its outcome reported through the workers' door.

    A 429 whose Retry-After fits in `MAX_PACING_WAIT_S` is waited off here, once: the budget
    learned the refusal (every call is held for the Retry-After), and the call asks it again.
    Sending the job back to the queue for so short a wait would throw away its reservation
    and the calls it made; a second 429 in a row, or a longer wait, does send it back."""
    deployment = usage.route[step]
    use = usage.uses[deployment.label]
    estimate = llm.prompt_tokens_estimate(messages) + max_tokens
    refused: RateLimited | None = None
    while True:
        slot = _call_slot(budget, usage=usage, use=use, estimate=estimate, refused=refused)
        started = time.monotonic()
        try:
            result = _chat_traced(messages=messages, max_tokens=max_tokens, deployment=deployment, step=step)
        except RateLimited as exc:
            work.call_refused(
                budget=budget,
                usage=usage,
                deployment=deployment,
                slot=slot,
                tokens=estimate,
                retry_after_s=exc.retry_after_s,
                remaining_requests=exc.rate_limits.remaining_requests,
                remaining_tokens=exc.rate_limits.remaining_tokens,
            )
            if refused is not None or exc.retry_after_s > MAX_PACING_WAIT_S:
                raise
            refused = exc
            continue
        except ConfigurationFault as exc:
            reason = work.deployment_fault(
                deployment=deployment, status=exc.status, code=exc.code, param=exc.param
            )
            raise ConfigurationFault(reason, status=exc.status, code=exc.code, param=exc.param) from exc
        except TransientError as exc:  # down (unreachable, 5xx): its pool or fallback takes over
            work.deployment_down(deployment=deployment, status=exc.status)
            raise
        break
    info = result.rate_limits
    work.call_done(
        budget=budget,
        usage=usage,
        deployment=deployment,
        step=step,
        slot=slot,
        seconds=time.monotonic() - started,
        remaining_requests=info.remaining_requests,
        remaining_tokens=info.remaining_tokens,
        reset_requests_s=info.reset_requests_s,
        reset_tokens_s=info.reset_tokens_s,
        processing_ms=result.processing_ms,
        tokens=result.total_tokens,
        input_tokens=result.prompt_tokens,
        output_tokens=result.completion_tokens,
    )
    return result.text


def _call_slot(
    budget: Budget, *, usage: JobBudget, use: work.Usage, estimate: int, refused: RateLimited | None
) -> work.CallSlot:
    """The budget's go for one call, its short waits slept off. A longer wait re-queues the job
    (Paced), or, waiting after a 429, as that 429 (it counts towards RETRY_MAX_RATE_LIMITED)."""
    if shutdown.handing_back.is_set():
        raise HandedBack()
    try:
        slot = work.call_slot(
            budget=budget, usage=usage, use=use, tokens=estimate, max_wait_s=MAX_PACING_WAIT_S
        )
    except ValueError as exc:  # no window ever holds it: dead-lettered, not retried for ever
        raise PermanentError(f"LLM call too large: {exc}") from exc
    if isinstance(slot, work.PacingWait):
        if refused is not None:
            raise refused
        raise Paced(wait_s=slot.wait_s, cause=slot.cause)
    return slot


def _chat_traced(
    *, messages: list[llm.ChatMessage], max_tokens: int, deployment: Deployment, step: str
) -> llm.LLMResult:
    """llm.chat in a span (config.tracing; a no-op when tracing is off) named and described as
    OpenTelemetry's GenAI conventions say, with the deployment and the step; never the prompt
    or the draft. A failure leaves it as an error span with the exception's class."""
    model = deployment.model or settings.LLM_MODEL
    attributes: tracing.Attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": max_tokens,
        "outreach.llm.deployment": deployment.label,
        "outreach.llm.step": step,
    }
    with tracing.span(f"chat {model}", attributes) as notes:
        result = llm.chat(messages=messages, max_tokens=max_tokens, deployment=deployment)
        notes.set(
            {
                "gen_ai.usage.input_tokens": result.prompt_tokens,
                "gen_ai.usage.output_tokens": result.completion_tokens,
                "gen_ai.response.finish_reasons": [result.finish_reason] if result.finish_reason else None,
                "gen_ai.response.id": result.request_id,
                "outreach.llm.usage_estimated": result.usage_estimated,
            }
        )
    return result


def _record_draft(*, outreach: Outreach, subject: str, body: str, usage: JobBudget) -> State | None:
    """Keep the paid-for draft: durably, so a connection that died during the LLM calls does
    not send the row back through recovery to be written (and paid for) again.

    Guarded on the reply's joined messages: a message that joined after this job read the
    row (nurture.intake.replies) is not in this draft, so it is discarded (`_rewrite_joined`).
    """
    try:
        return _record_draft_guarded(outreach=outreach, subject=subject, body=body, usage=usage)
    except TransitionLost:
        return _rewrite_joined(outreach=outreach)


def _rewrite_joined(*, outreach: Outreach) -> State | None:
    """A later message joined while the draft was written: back to the queue, no attempt
    charged, to be written again (through the dispatcher and the budget) with every message.
    One email still leaves: this draft never does. None: the row is not ours.

    The lead just wrote: the answer waits a quiet period again (nurture.quiet), counted from
    now, a moment after that message arrived (at once when the period is 0). A class the model
    gave this job read the messages before that one: emptied with the draft, so the rerun
    classifies the whole turn again (`reply_class_reopened`: a joined complaint after
    "Interested!" is a complaint, never answered alone)."""
    try:
        transition(
            outreach_id=outreach.pk,
            from_=State.GENERATING,
            to=State.QUEUED,
            guard=Q(inbound_joined__gt=outreach.inbound_joined),
            note="a later message from the lead joined: draft discarded, written again with it",
            reservation_id="",
            blocked_reason="",
            **reply_class_reopened(),
            not_before=reply_due(
                last_message_at=timezone.now(), quiet_s=reply_quiet_s(organization=outreach.lead.organization)
            ),
        )
    except TransitionLost:
        log.info("draft not recorded: not generating any more", extra=outreach_log_context(outreach))
        return None
    return State.QUEUED


def _record_draft_guarded(*, outreach: Outreach, subject: str, body: str, usage: JobBudget) -> State:
    guard = Q(inbound_joined=outreach.inbound_joined)
    fields: dict[str, Any] = {
        "draft_subject": subject,
        "draft_body": body,
        **_spent(usage),
        "generated_at": timezone.now(),
        "last_error": "",
    }
    needs_person = reply_needs_person(
        reply_class=outreach.reply_class,
        organization=outreach.lead.organization,
        review_required=outreach.owner.review_required,
    )
    if needs_person:
        transition_durably(
            outreach_id=outreach.pk, from_=State.GENERATING, to=State.AWAITING_APPROVAL, guard=guard, **fields
        )
        work.replay_outcome_success(outreach_id=outreach.pk)  # a replayed job that got this far succeeded
        return State.AWAITING_APPROVAL
    transition_durably(
        outreach_id=outreach.pk,
        from_=State.GENERATING,
        to=State.DISPATCHED,
        note="autonomous: send",
        guard=guard,
        then=lambda: enqueue_send(outreach_id=outreach.pk, reply=outreach.tier == Tier.REPLY),
        **fields,
    )
    return State.DISPATCHED


def enqueue_send(*, outreach_id: int, reply: bool = False) -> None:
    """A reply's email goes out from the reply lane too (its worker runs every task), so it does
    not wait behind a backlog of intro sends any more than its generation waited behind theirs."""
    from config.celery import app

    app.send_task("nurture.send", args=[outreach_id], queue=Queue.REPLY.value if reply else None)
