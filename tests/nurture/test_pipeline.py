"""The generation and send services, called directly (as a task would), over real HTTP to a
scripted provider and real SMTP to a sink, with the real budget in Redis."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from django.utils import timezone

from config import shutdown
from devtools.llm_stub import LLMStub, StubRequest, StubResponse
from devtools.smtp_sink import SMTPSink
from nurture.mail.sending import outreach_send
from nurture.review import draft_approve
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Limits, Reservation
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Lead, Outreach, OutreachEvent, State
from tests.factories import make_lead, make_outreach, make_owner, make_reviewer

pytestmark = pytest.mark.django_db


def _dispatched(budget: Budget, **fields: Any) -> Outreach:
    """An outreach as the dispatcher leaves it: DISPATCHED, holding a reservation."""
    reservation = budget.reserve(requests=3, tokens=1800)
    assert isinstance(reservation, Reservation)
    return make_outreach(state=State.DISPATCHED, reservation_id=reservation.id, **fields)


def test_autonomous_outreach_three_calls_then_one_email_with_headers(
    budget: Budget, llm_stub: LLMStub, smtp_sink: SMTPSink, django_capture_on_commit_callbacks: Any
) -> None:
    # given an autonomous owner's dispatched intro
    outreach = _dispatched(budget)
    # when the generation task runs, then the send task
    with django_capture_on_commit_callbacks() as callbacks:
        assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DISPATCHED
    assert len(callbacks) == 1  # the send task is enqueued on commit
    assert outreach_send(outreach_id=outreach.pk) == State.SENT
    # then three LLM calls were made, and exactly one email arrived with the product's headers
    assert len(llm_stub.requests) == 3
    smtp_sink.wait_for(1)
    message = smtp_sink.messages[0].message
    outreach.refresh_from_db()
    assert message["Message-ID"] == outreach.message_id
    assert message["To"] == outreach.lead.email
    assert message["Subject"] == "Hello"
    assert "unsubscribe" in message["List-Unsubscribe"]
    assert (outreach.llm_calls, outreach.tokens_used > 0, outreach.reservation_id) == (3, True, "")


def test_review_required_draft_waits_then_approval_sends_without_llm(
    budget: Budget, llm_stub: LLMStub, smtp_sink: SMTPSink, django_capture_on_commit_callbacks: Any
) -> None:
    # given a seller whose drafts need review
    owner = make_owner(review_required=True)
    outreach = _dispatched(budget, lead=make_lead(owner=owner))
    # when it is generated, the draft waits
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.AWAITING_APPROVAL
    assert smtp_sink.messages == []
    # when a person approves and the next cycle routes it to send
    draft_approve(
        outreach=Outreach.objects.get(pk=outreach.pk),
        by=make_reviewer("rev"),
        body="Edited body text here.",
    )
    with django_capture_on_commit_callbacks(execute=False):
        report = dispatch_cycle(budget=budget)
    assert report.send == [outreach.pk]
    assert outreach_send(outreach_id=outreach.pk) == State.SENT
    # then the edited email is sent and no further LLM call was made
    smtp_sink.wait_for(1)
    assert "Edited body text here." in smtp_sink.messages[0].message.get_content()
    assert len(llm_stub.requests) == 3


def test_provider_429_requeues_with_not_before_and_is_not_a_failed_attempt(
    budget: Budget, llm_stub: LLMStub
) -> None:
    llm_stub.push(StubResponse(status=429, headers={"retry-after": "30"}))
    outreach = _dispatched(budget)
    before = timezone.now()
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.QUEUED
    outreach.refresh_from_db()
    assert outreach.attempts == 0
    assert 29 <= (outreach.not_before - before).total_seconds() <= 32
    assert OutreachEvent.objects.filter(outreach=outreach, error_class=ErrorClass.RATE_LIMITED).count() == 1
    assert budget.snapshot()["scopes"]["provider"]["last_429_ms"]  # the budget adapted at once


def test_a_429_with_a_short_retry_after_is_waited_off_in_the_worker_and_the_job_goes_on(
    budget: Budget, llm_stub: LLMStub
) -> None:
    # given a dispatched intro whose first call the provider refuses for 300 ms
    llm_stub.push(StubResponse(status=429, headers={"retry-after-ms": "300"}))
    outreach = _dispatched(budget)
    # when the generation job runs
    started = time.monotonic()
    state = outreach_generate(outreach_id=outreach.pk, budget=budget)
    took_s = time.monotonic() - started
    # then it waits the 300 ms out (through the budget, which held every call for them), makes
    # the call again and writes its draft: the job's reservation and earlier calls are not
    # thrown away to the queue for a wait shorter than one call
    assert state == State.DISPATCHED
    assert len(llm_stub.requests) == 4
    assert took_s >= 0.3  # the stub answers at once: the rest is the wait
    assert not OutreachEvent.objects.filter(outreach=outreach, error_class=ErrorClass.RATE_LIMITED).exists()
    # and the refusal is on record where the operator looks: the budget counted it
    provider = budget.snapshot()["scopes"]["provider"]
    assert (provider["answered_429"], provider["last_429_ms"] > 0) == (1, True)


def test_a_429s_remaining_counts_raise_the_estimate_of_the_other_clients_at_once(
    redis_client: redis.Redis, llm_stub: LLMStub
) -> None:
    # given a key of 300,000 tokens/min whose refusal says 200,000 remain: another client holds
    # about 100,000 (the refused call is not in the provider's window, nor in our log)
    budget = Budget(redis_client=redis_client, limits=Limits(rpm=100_000, tpm=300_000, burst_ms=60_000))
    llm_stub.push(
        StubResponse(
            status=429,
            headers={"retry-after-ms": "50", "x-ratelimit-remaining-tokens": "200000"},
        )
    )
    outreach = _dispatched(budget)
    # when the job runs (its refused call waited off, the next ones answered without counts)
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DISPATCHED
    # then the budget took the refusal's view of the window: the other client's tokens, and our
    # limit under them
    provider = budget.snapshot()["scopes"]["provider"]
    assert 95_000 <= provider["foreign_tokens"] <= 100_000
    assert provider["limit_tpm"] <= 200_000


def test_a_second_429_in_a_row_sends_the_job_back_to_the_queue(budget: Budget, llm_stub: LLMStub) -> None:
    # given a provider refusing a call twice, each time for 100 ms
    for _ in range(2):
        llm_stub.push(StubResponse(status=429, headers={"retry-after-ms": "100"}))
    outreach = _dispatched(budget)
    # when the job runs, then one wait is taken in the worker and the second refusal re-queues it
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.QUEUED
    assert len(llm_stub.requests) == 2
    assert OutreachEvent.objects.filter(outreach=outreach, error_class=ErrorClass.RATE_LIMITED).count() == 1
    assert budget.snapshot()["scopes"]["provider"]["answered_429"] == 2


def test_repeated_5xx_retries_with_backoff_then_dead_with_history(
    budget: Budget, llm_stub: LLMStub, settings: Any
) -> None:
    settings.RETRY_MAX_ATTEMPTS = 3
    llm_stub.default = StubResponse(status=500)
    outreach = _dispatched(budget)
    states = []
    for _ in range(3):
        states.append(outreach_generate(outreach_id=outreach.pk, budget=budget))
        Outreach.objects.filter(pk=outreach.pk, state=State.QUEUED).update(
            state=State.DISPATCHED
        )  # re-dispatch
    assert states == [State.QUEUED, State.QUEUED, State.DEAD]
    letter = DeadLetter.objects.get(outreach=outreach)
    assert letter.failure_class == ErrorClass.EXHAUSTED
    assert [h["error_class"] for h in letter.retry_history] == ["transient", "transient", "exhausted"]
    assert letter.payload["idempotency_key"] == outreach.idempotency_key


def test_400_is_dead_at_once(budget: Budget, llm_stub: LLMStub) -> None:
    llm_stub.push(StubResponse(status=400))
    outreach = _dispatched(budget)
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DEAD
    assert DeadLetter.objects.get(outreach=outreach).failure_class == ErrorClass.PERMANENT
    assert len(llm_stub.requests) == 1


def test_policy_failure_regenerates_once_then_dead(budget: Budget, llm_stub: LLMStub) -> None:
    bad = StubResponse(text="Subject: Hi {{first_name}}\n\nSee http://evil.example for more, {{first_name}}.")
    llm_stub.default = bad
    outreach = _dispatched(budget)
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DEAD
    assert len(llm_stub.requests) == 4  # plan, context, message, one regeneration
    assert DeadLetter.objects.get(outreach=outreach).failure_class == ErrorClass.POLICY


def test_policy_failure_fixed_by_the_regeneration_goes_on(budget: Budget, llm_stub: LLMStub) -> None:
    good = StubResponse()
    llm_stub.push(
        good, good, StubResponse(text="Subject: Hi\n\nVisit http://evil.example today please."), good
    )
    outreach = _dispatched(budget)
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DISPATCHED


def test_same_send_task_delivered_twice_sends_one_email(smtp_sink: SMTPSink) -> None:
    outreach = make_outreach(
        state=State.DISPATCHED, draft_subject="Hello", draft_body="A short body for the test."
    )
    assert outreach_send(outreach_id=outreach.pk) == State.SENT
    assert outreach_send(outreach_id=outreach.pk) is None
    smtp_sink.wait_for(1)
    assert len(smtp_sink.messages) == 1


def test_opted_out_lead_is_cancelled_not_emailed(
    budget: Budget, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    outreach = _dispatched(budget, lead=make_lead(status=Lead.Status.OPTED_OUT))
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.CANCELLED
    assert llm_stub.requests == []
    assert smtp_sink.messages == []


def test_smtp_outage_retries_the_draft_not_the_llm(settings: Any) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2  # nothing listens
    outreach = make_outreach(
        state=State.DISPATCHED, draft_subject="Hello", draft_body="A short body for the test."
    )
    assert outreach_send(outreach_id=outreach.pk) == State.APPROVED
    outreach.refresh_from_db()
    assert (outreach.attempts, outreach.error_class) == (1, ErrorClass.TRANSIENT)
    assert outreach.not_before > timezone.now()


def test_replayed_dead_letter_sends_and_counts_as_a_successful_replay(
    budget: Budget, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given a send that died, replayed by an operator
    from orchestrator.failures.dead_letters import dead_letter_replay, replay_success_rate

    llm_stub.push(StubResponse(status=400))
    outreach = _dispatched(budget)
    outreach_generate(outreach_id=outreach.pk, budget=budget)
    replayed = dead_letter_replay(dead_letter=DeadLetter.objects.get(outreach=outreach))
    assert replayed.state == State.QUEUED
    # when it is dispatched and runs again
    Outreach.objects.filter(pk=outreach.pk).update(state=State.DISPATCHED)
    outreach_generate(outreach_id=outreach.pk, budget=budget)
    assert outreach_send(outreach_id=outreach.pk) == State.SENT
    # then the replay is recorded as a success, with the original idempotency key
    assert DeadLetter.objects.get(outreach=outreach).replay_succeeded is True
    assert replay_success_rate() == 1.0
    assert Outreach.objects.get(pk=outreach.pk).idempotency_key == outreach.idempotency_key


def test_nudge_waits_until_its_intro_was_sent(budget: Budget, llm_stub: LLMStub) -> None:
    # given a lead whose intro is still queued behind the owner's backlog, and its nudge due
    lead = make_lead()
    make_outreach(lead=lead, kind=Outreach.Kind.INTRO, step=0)
    nudge = _dispatched(budget, lead=lead, kind=Outreach.Kind.NUDGE, step=1)
    # when the nudge's generation task runs
    assert outreach_generate(outreach_id=nudge.pk, budget=budget) == State.QUEUED
    # then no LLM call was made, it waits with a reason, and its budget came back
    nudge.refresh_from_db()
    assert llm_stub.requests == []
    assert nudge.blocked_reason == "waiting for step 0 to be sent"
    assert nudge.not_before > timezone.now()
    assert (nudge.reservation_id, nudge.attempts) == ("", 0)


def test_nudge_after_a_dead_intro_is_cancelled(budget: Budget, llm_stub: LLMStub) -> None:
    lead = make_lead()
    make_outreach(lead=lead, kind=Outreach.Kind.INTRO, step=0, state=State.DEAD)
    nudge = _dispatched(budget, lead=lead, kind=Outreach.Kind.NUDGE, step=1)
    assert outreach_generate(outreach_id=nudge.pk, budget=budget) == State.CANCELLED
    assert llm_stub.requests == []


def test_intro_for_a_lead_who_replied_meanwhile_is_cancelled(budget: Budget, llm_stub: LLMStub) -> None:
    outreach = _dispatched(budget, lead=make_lead(status=Lead.Status.REPLIED))
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.CANCELLED
    assert llm_stub.requests == []


def test_written_nudge_is_not_sent_after_the_lead_converted(smtp_sink: SMTPSink) -> None:
    # given a nudge drafted and routed to send, then the lead converts
    lead = make_lead()
    make_outreach(lead=lead, kind=Outreach.Kind.INTRO, step=0, state=State.SENT)
    nudge = make_outreach(
        lead=lead,
        kind=Outreach.Kind.NUDGE,
        step=1,
        state=State.DISPATCHED,
        draft_subject="Following up",
        draft_body="Just checking in on my last note.",
    )
    Lead.objects.filter(pk=lead.pk).update(status=Lead.Status.CONVERTED)
    # when the send task runs, nothing is emailed
    assert outreach_send(outreach_id=nudge.pk) == State.CANCELLED
    assert smtp_sink.messages == []


def test_a_replys_email_is_sent_from_the_reply_lane_not_behind_intro_sends(
    budget: Budget, llm_stub: LLMStub, redis_client: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given an autonomous owner's dispatched reply and intro
    inbound = {"subject": "Re: hi", "body": "Yes, Tuesday works.", "message_id": "<t@x>"}
    reply = _dispatched(budget, kind=Outreach.Kind.REPLY, context={"inbound": inbound})
    intro = _dispatched(budget)
    # when both are written
    with django_capture_on_commit_callbacks(execute=True):
        outreach_generate(outreach_id=reply.pk, budget=budget)
        outreach_generate(outreach_id=intro.pk, budget=budget)
    # then the reply's send task waits on the reply lane, the intro's on the send queue
    on_reply_lane = [str(raw) for raw in redis_client.lrange("reply", 0, -1)]
    on_send_queue = [str(raw) for raw in redis_client.lrange("send", 0, -1)]
    assert (len(on_reply_lane), len(on_send_queue)) == (1, 1)
    assert f"[{reply.pk}]" in on_reply_lane[0]
    assert f"[{intro.pk}]" in on_send_queue[0]


def test_a_job_whose_worker_stops_past_its_grace_hands_back_after_the_call_in_progress(
    budget: Budget, llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a dispatched intro, and its worker's grace running out during the first call
    outreach = _dispatched(budget)
    answer = llm_stub.next_response

    def grace_over_during_the_call(request: StubRequest) -> StubResponse:
        shutdown.handing_back.set()
        return answer(request)

    monkeypatch.setattr(llm_stub, "next_response", grace_over_during_the_call)
    try:
        # when the job runs
        state = outreach_generate(outreach_id=outreach.pk, budget=budget)
    finally:
        shutdown.handing_back.clear()
    # then it stopped after that call and went back to the queue, no attempt charged
    assert state == State.QUEUED
    assert len(llm_stub.requests) == 1
    outreach.refresh_from_db()
    assert (outreach.state, outreach.attempts, outreach.reservation_id) == (State.QUEUED, 0, "")
    assert OutreachEvent.objects.filter(outreach=outreach, note__contains="handed back").exists()
    # and its reservation is closed (the one call settled, the rest given back): none outstanding
    snapshot = budget.snapshot()
    assert (snapshot["in_flight"], snapshot["outstanding_requests"]) == (0, 0)
