"""One answer per conversation turn: a lead's messages that arrive while our answer is queued,
dispatched or being written join that answer; never two emails (nurture.intake.replies,
nurture.writing.generation). Each race is driven for real: the webhook over HTTP, the provider over
HTTP (a scripted stub), SMTP to a sink, the budget in Redis, concurrent intake on threads."""

from __future__ import annotations

import dataclasses
import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from threading import Barrier
from typing import Any

import pytest
from django.db import connection
from django.db.models import Q
from django.test import Client
from django.utils import timezone

from devtools.llm_stub import LLMStub, StubResponse, triage_answered
from devtools.smtp_sink import SMTPSink
from nurture.intake.replies import InboundReply, reply_receive, signature_header
from nurture.mail.sending import outreach_send
from nurture.writing.generation import _rewrite_joined, outreach_generate
from nurture.writing.prompts import plan_prompt, prompt_facts
from orchestrator.budget import Budget, Reservation
from orchestrator.dispatch.reads import ready_candidates
from outreach.models import Lead, Outreach, State
from outreach.tiers import Tier
from outreach.transitions import TransitionLost, transition
from tests.conftest import WEBHOOK_SECRET
from tests.factories import make_draft, make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.usefixtures("webhook_secret")


def _post(client: Client, lead: Lead, *, n: int, body: str) -> Any:
    payload = {
        "lead_email": lead.email,
        "message_id": f"<m{n}@prospect.example>",
        "subject": "Re: hi",
        "body": body,
    }
    raw = json.dumps(payload).encode()
    header = signature_header(body=raw, secret=WEBHOOK_SECRET, timestamp=int(time.time()))
    return client.post(
        "/hooks/replies/", data=raw, content_type="application/json", headers={"X-Signature": header}
    )


def _receive(lead: Lead, *, n: int, body: str) -> Any:
    message = InboundReply(
        lead_email=lead.email, message_id=f"<m{n}@prospect.example>", subject="Re: hi", body=body
    )
    return reply_receive(reply=message)


def _dispatch(budget: Budget, outreach_id: int) -> None:
    """What the dispatcher does to a queued row: a reservation, then QUEUED -> DISPATCHED."""
    reservation = budget.reserve(requests=3, tokens=1800)
    assert isinstance(reservation, Reservation)
    transition(
        outreach_id=outreach_id, from_=State.QUEUED, to=State.DISPATCHED, reservation_id=reservation.id
    )


def _prompt_text(request: Any) -> str:
    return "\n".join(m["content"] for m in request.json["messages"])


@pytest.mark.django_db
def test_a_second_message_while_the_answer_is_queued_joins_it(client: Client) -> None:
    # given a lead whose first message queued our answer
    lead = make_lead()
    first = _post(client, lead, n=1, body="What does it cost?").json()
    # when the second message arrives (and is delivered twice)
    second = _post(client, lead, n=2, body="And is there a trial?")
    again = _post(client, lead, n=2, body="And is there a trial?")
    # then it joined the queued answer: one reply, holding both messages, counted once
    assert first["created"] is True
    assert second.status_code == again.status_code == 202
    assert (second.json()["outreach_id"], second.json()["joined"], second.json()["created"]) == (
        first["outreach_id"],
        True,
        False,
    )
    assert again.json()["joined"] is False  # a duplicate delivery: already in
    reply = Outreach.objects.get(lead=lead, kind=Outreach.Kind.REPLY)
    assert reply.inbound_joined == 1
    assert [m["body"] for m in reply.context["joined"]] == ["And is there a trial?"]


@pytest.mark.django_db
def test_the_prompt_shows_every_message_of_the_turn() -> None:
    # given an answer with a message joined into it
    lead = make_lead()
    _receive(lead, n=1, body="What does it cost?")
    _receive(lead, n=2, body="And is there a trial?")
    reply = Outreach.objects.get(lead=lead)
    # when the prompt is built
    data = json.loads(
        plan_prompt(facts=prompt_facts(outreach=reply))[-1]["content"].split("\n", 3)[3].rsplit("\n", 1)[0]
    )
    # then the model sees both, the later one as inbound_later
    assert data["inbound"]["body"] == "What does it cost?"
    assert data["inbound_later"] == [{"subject": "Re: hi", "body": "And is there a trial?"}]


@pytest.mark.django_db
def test_a_message_joined_into_a_sent_answer_stays_in_the_thread_of_the_next() -> None:
    # given an answer sent for two messages, and a third message later
    lead = make_lead()
    _receive(lead, n=1, body="What does it cost?")
    _receive(lead, n=2, body="And is there a trial?")
    Outreach.objects.filter(lead=lead).update(
        state=State.SENT, sent_at=timezone.now(), draft_subject="Re: hi", draft_body="Ten euros; yes."
    )
    third = _receive(lead, n=3, body="Great, sign me up.")
    # then the third is a new turn, and its prompt's thread holds both earlier messages
    assert third.created is True
    facts = prompt_facts(outreach=Outreach.objects.get(pk=third.outreach_id))
    assert [e["body"] for e in facts.thread] == [
        "What does it cost?",
        "And is there a trial?",
        "Ten euros; yes.",
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("state", [State.AWAITING_APPROVAL, State.APPROVED, State.DISPATCHED, State.SENDING])
def test_a_message_after_the_answer_is_written_starts_the_next_turn(state: State) -> None:
    # given an answer whose draft is written (waiting for review, or on its way to SMTP)
    lead = make_lead()
    written = make_draft(lead=lead, kind=Outreach.Kind.REPLY, state=state, context={"inbound": {"body": "a"}})
    # when another message arrives
    result = _receive(lead, n=9, body="One more thing")
    # then it is answered separately: the written draft does not have its text
    assert (result.created, result.joined) == (True, False)
    assert Outreach.objects.get(pk=written.pk).inbound_joined == 0


@pytest.mark.django_db(transaction=True)
def test_a_message_joined_while_the_answer_is_being_written_discards_the_draft_and_rewrites_it(
    budget: Budget, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given a dispatched answer being written by a worker (on its own thread and connection)
    lead = make_lead()
    reply_id = _receive(lead, n=1, body="What does it cost?").outreach_id
    _dispatch(budget, reply_id)
    llm_stub.push(StubResponse(delay_s=1.0))  # the first writing call is slow (triage is before it)
    with ThreadPoolExecutor(max_workers=1) as pool:
        job = pool.submit(_generate_on_thread, budget, reply_id)
        _wait(lambda: len(llm_stub.requests) == 2, what="the triage call, then the first writing call")
        # when the second message arrives mid-call
        assert _receive(lead, n=2, body="And is there a trial?").joined is True
        state = job.result(timeout=30)
    # then that draft was discarded: the answer is queued again at once, no attempt charged
    assert state == State.QUEUED
    row = Outreach.objects.get(pk=reply_id)
    assert (row.state, row.draft_body, row.attempts, row.inbound_joined) == (State.QUEUED, "", 0, 1)
    assert row.not_before <= timezone.now()
    assert row.events.order_by("-id")[0].note.startswith("a later message from the lead joined")
    assert smtp_sink.messages == []
    # when it is dispatched and written again, then sent
    _dispatch(budget, reply_id)
    assert _generate_on_thread(budget, reply_id) == State.DISPATCHED
    assert outreach_send(outreach_id=reply_id) == State.SENT
    # then one email left, written from prompts holding both messages (the discarded one had one)
    assert len(smtp_sink.wait_for(1)) == 1
    assert "And is there a trial?" not in _prompt_text(llm_stub.requests[0])
    # (the first job made its four calls; the model's class was cleared with the draft, so the
    # rerun classifies the whole turn again: one more triage call, then the three writing calls)
    rewritten = [_prompt_text(r) for r in llm_stub.requests[4:]]
    assert len(rewritten) == 4
    assert all("What does it cost?" in p and "And is there a trial?" in p for p in rewritten)
    assert (row.reply_class, row.reply_class_by) == ("", "")  # cleared when the draft was discarded
    assert Outreach.objects.get(pk=reply_id).reply_class_by == "model"


@pytest.mark.django_db(transaction=True)
def test_a_complaint_joined_while_the_answer_is_being_written_goes_to_a_person(
    budget: Budget, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given an autonomous owner's lead whose "Interested!" was classified by the model as
    # interested (answered alone by default), and whose answer is being written
    owner = make_owner(review_required=False)
    lead = make_lead(owner=owner)
    reply_id = _receive(lead, n=1, body="Interested!").outreach_id
    _dispatch(budget, reply_id)
    llm_stub.push(StubResponse(delay_s=1.0))  # the first writing call is slow
    with ThreadPoolExecutor(max_workers=1) as pool:
        job = pool.submit(_generate_on_thread, budget, reply_id)
        _wait(lambda: len(llm_stub.requests) == 2, what="the triage call, then the first writing call")
        assert Outreach.objects.get(pk=reply_id).reply_class == "interested"
        # when a complaint joins mid-call
        complaint = "Stop this spam or I will report you to the data protection authority."
        assert _receive(lead, n=2, body=complaint).joined is True
        assert job.result(timeout=30) == State.QUEUED
    # then the rewrite classifies the whole turn again, and the complaint waits for a person
    _dispatch(budget, reply_id)
    assert _generate_on_thread(budget, reply_id) == State.AWAITING_APPROVAL
    row = Outreach.objects.get(pk=reply_id)
    assert (row.reply_class, row.reply_class_by) == ("complaint", "model")
    assert smtp_sink.messages == []


@pytest.mark.django_db(transaction=True)
def test_a_complaint_joining_an_answer_queued_again_after_its_triage_is_classified_again(
    budget: Budget, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given an autonomous owner's answer classified interested by the model, then put back in
    # the queue by the provider's 429s on its first writing call (the first is waited off in
    # the worker, the second sends the job back)
    owner = make_owner(review_required=False)
    lead = make_lead(owner=owner)
    reply_id = _receive(lead, n=1, body="Interested!").outreach_id
    _dispatch(budget, reply_id)
    for _ in range(2):
        llm_stub.push(StubResponse(status=429, text="slow down", headers={"retry-after": "0"}))
    assert _generate_on_thread(budget, reply_id) == State.QUEUED
    assert Outreach.objects.get(pk=reply_id).reply_class == "interested"
    # when a complaint joins it while it waits
    assert _receive(lead, n=2, body="Only with a 40% discount, or no deal.").joined
    # then the next job classifies the whole turn again, and a person sees it
    _dispatch(budget, reply_id)
    assert _generate_on_thread(budget, reply_id) == State.AWAITING_APPROVAL
    row = Outreach.objects.get(pk=reply_id)
    assert (row.reply_class, row.reply_class_by) == ("complaint", "model")
    assert smtp_sink.messages == []


@pytest.mark.django_db(transaction=True)
def test_a_message_joined_during_a_triage_that_answers_nothing_is_classified_with_it_not_dropped(
    budget: Budget, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given a lead's "not interested" (an objection: no answer by default) whose triage call is slow
    lead = make_lead(owner=make_owner(review_required=False))
    reply_id = _receive(lead, n=1, body="Not interested, thanks.").outreach_id
    _dispatch(budget, reply_id)
    llm_stub.triage = lambda request: dataclasses.replace(triage_answered(request), delay_s=1.0)
    with ThreadPoolExecutor(max_workers=1) as pool:
        job = pool.submit(_generate_on_thread, budget, reply_id)
        _wait(lambda: len(llm_stub.requests) == 1, what="the triage call")
        # when the lead writes again while the model reads the first message
        assert _receive(lead, n=2, body="Actually, what would a pilot cost?").joined is True
        state = job.result(timeout=30)
    # then the turn is not cancelled on a class given before that message: it is queued again,
    # its class emptied, and the next job classifies both messages together
    assert state == State.QUEUED
    row = Outreach.objects.get(pk=reply_id)
    assert (row.state, row.reply_class, row.inbound_joined) == (State.QUEUED, "", 1)
    _dispatch(budget, reply_id)
    _generate_on_thread(budget, reply_id)
    again = _prompt_text(llm_stub.requests[1])
    assert "Not interested, thanks." in again
    assert "what would a pilot cost?" in again
    assert Outreach.objects.get(pk=reply_id).reply_class_by == "model"


def _generate_on_thread(budget: Budget, outreach_id: int) -> State | None:
    try:
        return outreach_generate(outreach_id=outreach_id, budget=budget)
    finally:
        connection.close()


def _wait(check: Any, *, what: str, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.django_db
def test_a_message_joined_while_dispatched_before_generation_reads_is_in_the_first_draft(
    budget: Budget, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given a dispatched answer whose job has not started yet
    lead = make_lead()
    reply_id = _receive(lead, n=1, body="What does it cost?").outreach_id
    _dispatch(budget, reply_id)
    # when a second message joins it before the worker picks it up
    assert _receive(lead, n=2, body="And is there a trial?").joined is True
    with django_capture_on_commit_callbacks(execute=False):
        state = outreach_generate(outreach_id=reply_id, budget=budget)
    # then the first draft already answers both and is kept
    assert state == State.DISPATCHED
    assert all("And is there a trial?" in _prompt_text(r) for r in llm_stub.requests)


@pytest.mark.django_db
def test_a_draft_record_is_guarded_on_the_joined_count() -> None:
    # given a reply being written after one message joined it
    row = make_outreach(kind=Outreach.Kind.REPLY, state=State.GENERATING, inbound_joined=1)
    # when a job that read it before that join records its draft
    with pytest.raises(TransitionLost):
        transition(
            outreach_id=row.pk, from_=State.GENERATING, to=State.AWAITING_APPROVAL, guard=Q(inbound_joined=0)
        )
    # then nothing moved; a job that read the current count may
    assert Outreach.objects.get(pk=row.pk).state == State.GENERATING
    transition(
        outreach_id=row.pk, from_=State.GENERATING, to=State.AWAITING_APPROVAL, guard=Q(inbound_joined=1)
    )


@pytest.mark.django_db(transaction=True)
def test_two_messages_arriving_at_once_make_one_answer() -> None:
    # given a lead with nothing pending, and two different messages delivered at the same instant
    lead = make_lead()
    barrier = Barrier(2)

    def deliver(n: int) -> Any:
        try:
            barrier.wait(timeout=10)
            return _post(Client(), lead, n=n, body=f"message {n}").json()
        finally:
            connection.close()

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(deliver, [1, 2]))
    # then one created the answer and the other joined it
    assert sorted((r["created"], r["joined"]) for r in results) == [(False, True), (True, False)]
    reply = Outreach.objects.get(lead=lead, kind=Outreach.Kind.REPLY)
    assert reply.inbound_joined == 1


# --- The quiet period (nurture.quiet): one answer per burst --------------------------------


def _due(reply_id: int) -> datetime:
    return Outreach.objects.values_list("not_before", flat=True).get(pk=reply_id)


@pytest.mark.django_db
def test_a_message_queues_its_answer_a_quiet_period_later(settings: Any) -> None:
    # given REPLY_QUIET_S=10
    settings.REPLY_QUIET_S = 10
    lead = make_lead()
    # when the lead writes
    before = timezone.now()
    reply_id = _receive(lead, n=1, body="What does it cost?").outreach_id
    after = timezone.now()
    # then the answer is queued, due 10 s after the message, and the dispatcher does not see it
    # before then (the reply tier's ready rows), only after
    due = _due(reply_id)
    assert before + timedelta(seconds=10) <= due <= after + timedelta(seconds=10)
    assert ready_candidates(tier=Tier.REPLY, k_by_owner={lead.owner_id: 5}, now=after) == {}
    later = ready_candidates(tier=Tier.REPLY, k_by_owner={lead.owner_id: 5}, now=due)
    assert [c.outreach_id for c in later[lead.owner_id]] == [reply_id]


@pytest.mark.django_db
def test_a_message_that_joins_the_pending_answer_pushes_it_out(settings: Any) -> None:
    # given a lead's answer queued by a first message, REPLY_QUIET_S=10
    settings.REPLY_QUIET_S = 10
    lead = make_lead()
    reply_id = _receive(lead, n=1, body="What does it cost?").outreach_id
    first_due = _due(reply_id)
    Outreach.objects.filter(pk=reply_id).update(not_before=first_due - timedelta(seconds=3))  # 3 s ago
    # when a second message arrives
    before = timezone.now()
    joined = _receive(lead, n=2, body="And is there a trial?")
    after = timezone.now()
    # then it joined the answer, now due 10 s after the second message
    assert (joined.outreach_id, joined.joined) == (reply_id, True)
    assert before + timedelta(seconds=10) <= _due(reply_id) <= after + timedelta(seconds=10)


@pytest.mark.django_db
def test_a_joining_message_never_pulls_a_backoff_in(settings: Any) -> None:
    # given a queued answer waiting out a backoff an hour long
    settings.REPLY_QUIET_S = 10
    lead = make_lead()
    reply_id = _receive(lead, n=1, body="What does it cost?").outreach_id
    backoff = timezone.now() + timedelta(hours=1)
    Outreach.objects.filter(pk=reply_id).update(not_before=backoff)
    # when a message joins it
    assert _receive(lead, n=2, body="And is there a trial?").joined is True
    # then it still waits for its backoff
    assert _due(reply_id) == backoff


@pytest.mark.django_db
@pytest.mark.parametrize(("own_s", "expected_s"), [(3, 3), (0, 0), (None, 10)])
def test_the_organizations_quiet_period_wins_over_reply_quiet_s(
    settings: Any, own_s: int | None, expected_s: int
) -> None:
    # given REPLY_QUIET_S=10 and an organization with its own setting (or none)
    settings.REPLY_QUIET_S = 10
    lead = make_lead(owner=make_owner(organization=make_org(reply_quiet_s=own_s)))
    # when its lead writes
    before = timezone.now()
    reply_id = _receive(lead, n=1, body="Hello?").outreach_id
    after = timezone.now()
    # then the answer is due after the organization's quiet period
    due = _due(reply_id)
    assert before + timedelta(seconds=expected_s) <= due <= after + timedelta(seconds=expected_s)


@pytest.mark.django_db
def test_a_message_joining_an_answer_being_written_leaves_its_due_time_alone(settings: Any) -> None:
    # given an answer dispatched (its quiet period over) and a worker about to write it
    settings.REPLY_QUIET_S = 10
    lead = make_lead()
    reply_id = _receive(lead, n=1, body="What does it cost?").outreach_id
    Outreach.objects.filter(pk=reply_id).update(
        state=State.GENERATING, not_before=timezone.now() - timedelta(seconds=1)
    )
    was = _due(reply_id)
    # when a message joins it
    assert _receive(lead, n=2, body="And is there a trial?").joined is True
    # then the row's due time (what its latency counts from) is not moved while in flight
    assert _due(reply_id) == was


@pytest.mark.django_db
def test_a_draft_discarded_for_a_joined_message_waits_a_quiet_period_again(settings: Any) -> None:
    # given an answer being written by a job that read it before a message joined it
    settings.REPLY_QUIET_S = 10
    lead = make_lead()
    reply_id = _receive(lead, n=1, body="What does it cost?").outreach_id
    Outreach.objects.filter(pk=reply_id).update(state=State.GENERATING)
    read_by_the_job = Outreach.objects.select_related("lead__organization").get(pk=reply_id)
    assert _receive(lead, n=2, body="And is there a trial?").joined is True
    # when the job's draft is discarded
    before = timezone.now()
    assert _rewrite_joined(outreach=read_by_the_job) == State.QUEUED
    after = timezone.now()
    # then the answer goes back to the queue, due a quiet period later (the lead just wrote)
    assert Outreach.objects.get(pk=reply_id).state == State.QUEUED
    assert before + timedelta(seconds=10) <= _due(reply_id) <= after + timedelta(seconds=10)
