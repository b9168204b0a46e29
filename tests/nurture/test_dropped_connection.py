"""A database connection that dies while paid-for or unsendable work runs (LLM calls, the SMTP
call) must not lose that work: the outcome is recorded on a fresh connection, once.

The worker's own PostgreSQL backend is terminated from another connection while the provider
(or the mail server) is still answering, as a failover or an operator's pg_terminate_backend
would do. Transactional tests: the connection really closes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import redis
from django.db import connection
from django.utils import timezone

from devtools.llm_stub import LLMStub, StubResponse
from devtools.smtp_sink import SMTPSink
from nurture.mail import sending
from nurture.mail.sending import outreach_send
from nurture.tasks import generate
from nurture.writing import generation
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from outreach.models import Outreach, OutreachEvent, OwnerDailySends, State
from outreach.transitions import TransitionLost, transition_durably
from tests.factories import make_lead, make_outreach, make_owner

pytestmark = pytest.mark.django_db(transaction=True)


def _dsn() -> str:
    params = connection.get_connection_params()
    return f"host={params['host']} port={params['port']} user={params['user']} dbname={params['dbname']}"


@pytest.fixture
def kill_my_backend() -> Iterator[Any]:
    """kill(after_s): terminate this test's database backend `after_s` from now, from a thread."""
    threads: list[threading.Thread] = []

    def kill(after_s: float) -> None:
        connection.ensure_connection()
        pid = connection.connection.info.backend_pid
        dsn = _dsn()

        def terminate() -> None:
            threading.Event().wait(after_s)
            with psycopg.connect(dsn, autocommit=True) as other:
                other.execute("SELECT pg_terminate_backend(%s)", [pid])

        thread = threading.Thread(target=terminate, daemon=True)
        thread.start()
        threads.append(thread)

    yield kill
    for thread in threads:
        thread.join(10)


def terminate_my_backend() -> None:
    """Terminate this test's database backend from another connection, waiting until it is gone."""
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    with psycopg.connect(_dsn(), autocommit=True) as other:
        other.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])


def test_a_job_that_cannot_reach_the_database_goes_back_to_the_broker_without_an_attempt(
    llm_stub: LLMStub,
) -> None:
    # given a dispatched intro, and the worker's database connection dropped before the job starts
    outreach = make_outreach(lead=make_lead(owner=make_owner(review_required=True)), state=State.DISPATCHED)
    terminate_my_backend()
    # when the task runs: its first read fails on the dead connection
    result = generate.apply(args=[outreach.pk])
    # then the message was tried again (not failed) and, the database answering, the draft written
    # with no attempt charged and one claim in its history
    assert result.successful(), result.traceback
    outreach.refresh_from_db()
    assert (outreach.state, outreach.attempts) == (State.AWAITING_APPROVAL, 0)
    assert OutreachEvent.objects.filter(outreach=outreach, to_state=State.GENERATING).count() == 1


def test_a_job_that_loses_the_database_after_its_claim_goes_back_to_the_queue_uncharged(
    budget: Budget, llm_stub: LLMStub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a dispatched intro holding a reservation, and the connection dropped right after the
    # job claimed the row (fault injection: a real termination before the job's next read)
    outreach = _dispatched(budget)
    reservation_id = outreach.reservation_id
    real_gate = generation.sequence_gate

    def gate_after_a_drop(**kwargs: Any) -> Any:
        terminate_my_backend()
        return real_gate(**kwargs)

    monkeypatch.setattr(generation, "sequence_gate", gate_after_a_drop)
    # when the job runs
    state = outreach_generate(outreach_id=outreach.pk, budget=budget)
    # then the row is back in the queue on a fresh connection, no attempt charged, nothing
    # called, its reservation given back
    assert state == State.QUEUED
    outreach.refresh_from_db()
    assert (outreach.state, outreach.attempts, outreach.reservation_id) == (State.QUEUED, 0, "")
    assert OutreachEvent.objects.filter(
        outreach=outreach, note__startswith="database connection lost"
    ).exists()
    assert llm_stub.requests == []
    assert budget.refund(reservation_id=reservation_id) is False  # refunded already (at most once)


def test_a_send_that_loses_the_database_before_smtp_waits_approved_with_the_try_uncounted(
    smtp_sink: SMTPSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a written draft handed to `send`, and the connection dropped right after the claim
    outreach = make_outreach(state=State.DISPATCHED, draft_subject="Hi", draft_body="Hello there")
    real_gate = sending.sequence_gate

    def gate_after_a_drop(**kwargs: Any) -> Any:
        terminate_my_backend()
        return real_gate(**kwargs)

    monkeypatch.setattr(sending, "sequence_gate", gate_after_a_drop)
    # when the send job runs
    state = outreach_send(outreach_id=outreach.pk)
    # then nothing left, the draft waits APPROVED (recorded on a fresh connection), the try not counted
    assert state == State.APPROVED
    outreach.refresh_from_db()
    assert (outreach.state, outreach.send_attempts, outreach.attempts) == (State.APPROVED, 0, 0)
    assert smtp_sink.messages == []


def _dispatched(budget: Budget, **owner: Any) -> Outreach:
    reservation = budget.reserve(requests=3, tokens=1800)
    assert isinstance(reservation, Reservation)
    lead = make_lead(owner=make_owner(**owner))
    return make_outreach(lead=lead, state=State.DISPATCHED, reservation_id=reservation.id)


def test_draft_survives_a_connection_killed_during_the_llm_calls(
    budget: Budget, llm_stub: LLMStub, kill_my_backend: Any
) -> None:
    # given a review-required owner's dispatched intro, and a provider taking 0.3 s a call
    outreach = _dispatched(budget, review_required=True)
    llm_stub.default = StubResponse(delay_s=0.3)
    # when the worker's database connection is terminated during the LLM calls
    kill_my_backend(after_s=0.4)
    state = outreach_generate(outreach_id=outreach.pk, budget=budget)
    # then the draft is kept (recorded on a fresh connection), paid for once
    assert state == State.AWAITING_APPROVAL
    outreach.refresh_from_db()
    assert (outreach.state, outreach.llm_calls, len(llm_stub.requests)) == (State.AWAITING_APPROVAL, 3, 3)
    assert outreach.draft_body


def test_autonomous_draft_survives_and_its_send_is_enqueued_once(
    budget: Budget, llm_stub: LLMStub, kill_my_backend: Any, redis_client: redis.Redis
) -> None:
    # given an autonomous owner's dispatched intro
    outreach = _dispatched(budget)
    llm_stub.default = StubResponse(delay_s=0.3)
    # when the worker's connection is terminated during the LLM calls
    kill_my_backend(after_s=0.4)
    state = outreach_generate(outreach_id=outreach.pk, budget=budget)
    # then the draft is routed to send, and one send task is on the broker's send queue
    assert state == State.DISPATCHED
    outreach.refresh_from_db()
    assert (outreach.state, outreach.llm_calls) == (State.DISPATCHED, 3)
    assert redis_client.llen("send") == 1


def test_sent_is_recorded_once_when_the_connection_dies_during_smtp(
    smtp_sink: SMTPSink, kill_my_backend: Any
) -> None:
    # given a written draft and a mail server slow to say "250" after storing the message
    owner = make_owner()
    outreach = make_outreach(
        lead=make_lead(owner=owner), state=State.DISPATCHED, draft_subject="Hi", draft_body="Hello there"
    )
    smtp_sink.data_delay_s = 0.6
    # when the worker's connection is terminated while it waits for the server
    kill_my_backend(after_s=0.3)
    assert outreach_send(outreach_id=outreach.pk) == State.SENT
    # then SENT is recorded once, counted once, and one email went out
    outreach.refresh_from_db()
    assert outreach.state == State.SENT
    assert OutreachEvent.objects.filter(outreach=outreach, to_state=State.SENT).count() == 1
    assert OwnerDailySends.objects.get(owner=owner).sent == 1
    assert len(smtp_sink.messages) == 1


def test_durable_move_that_lost_a_race_still_raises(kill_my_backend: Any) -> None:
    # a row someone else already moved is not "committed by an earlier try": the loser is told
    outreach = make_outreach(state=State.CANCELLED)
    ran: list[str] = []
    with pytest.raises(TransitionLost):
        transition_durably(
            outreach_id=outreach.pk, from_=State.SENDING, to=State.SENT, then=lambda: ran.append("then")
        )
    assert ran == []


def test_durable_move_after_a_dead_connection_runs_then_once(kill_my_backend: Any) -> None:
    outreach = make_outreach(state=State.GENERATING)
    kill_my_backend(after_s=0)
    threading.Event().wait(0.3)  # the backend is gone before the move starts
    ran: list[str] = []
    transition_durably(
        outreach_id=outreach.pk, from_=State.GENERATING, to=State.DISPATCHED, then=lambda: ran.append("then")
    )
    outreach.refresh_from_db()
    assert outreach.state == State.DISPATCHED
    assert ran == ["then"]
    assert OutreachEvent.objects.filter(outreach=outreach, to_state=State.DISPATCHED).count() == 1


@pytest.fixture
def db_outage() -> Iterator[Any]:
    """outage(after_s, for_s): from `after_s` on, this test database refuses new connections and
    this test's backend is terminated; `for_s` later it accepts them again (also at teardown)."""
    dbname = connection.get_connection_params()["dbname"]
    admin_dsn = _dsn().replace(f"dbname={dbname}", "dbname=postgres")
    threads: list[threading.Thread] = []

    def allow(flag: bool) -> None:
        with psycopg.connect(admin_dsn, autocommit=True) as admin:
            admin.execute(f'ALTER DATABASE "{dbname}" WITH ALLOW_CONNECTIONS {str(flag).lower()}')

    def outage(*, after_s: float, for_s: float) -> None:
        connection.ensure_connection()
        pid = connection.connection.info.backend_pid

        def run() -> None:
            threading.Event().wait(after_s)
            allow(False)
            with psycopg.connect(admin_dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s)", [pid])
            threading.Event().wait(for_s)
            allow(True)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        threads.append(thread)

    yield outage
    for thread in threads:
        thread.join(15)
    allow(True)


def test_sent_unrecordable_through_a_long_outage_is_resent_once_then_possibly_sent(
    smtp_sink: SMTPSink, db_outage: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from django.db import InterfaceError, OperationalError

    from orchestrator.failures.recovery import recover_stuck
    from orchestrator.models import DeadLetter
    from outreach import transitions
    from outreach.models import ErrorClass

    # given a written draft, a server slow to say "250", and a database outage (1.5 s) longer
    # than the retries of the SENT record (0.1 s + 0.2 s here)
    monkeypatch.setattr(transitions, "DURABLE_RETRY_PAUSES_S", (0.1, 0.2))
    settings.DISPATCH_STUCK_AFTER_S = 1
    outreach = make_outreach(state=State.DISPATCHED, draft_subject="Hi", draft_body="Hello there")
    smtp_sink.data_delay_s = 0.6

    def send_through_an_outage() -> None:
        db_outage(after_s=0.3, for_s=1.5)
        with pytest.raises((OperationalError, InterfaceError)):
            outreach_send(outreach_id=outreach.pk)
        threading.Event().wait(1.6)  # the outage is over, and the row is past the stuck timeout
        connection.close()

    # when SENT cannot be written, then the row stays SENDING and recovery resends it once
    send_through_an_outage()
    outreach.refresh_from_db()
    assert (outreach.state, outreach.send_attempts) == (State.SENDING, 1)
    recover_stuck(now=timezone.now(), refund=lambda _: None)
    outreach.refresh_from_db()
    assert outreach.state == State.APPROVED
    # and when the resend's SENT cannot be written either, it is left to a person
    Outreach.objects.filter(pk=outreach.pk).update(state=State.DISPATCHED)
    send_through_an_outage()
    recover_stuck(now=timezone.now(), refund=lambda _: None)
    outreach.refresh_from_db()
    assert outreach.state == State.DEAD
    assert DeadLetter.objects.get(outreach=outreach).failure_class == ErrorClass.POSSIBLY_SENT
    # two copies at most, one Message-ID
    assert len(smtp_sink.messages) == 2
    assert {m.message["Message-ID"] for m in smtp_sink.messages} == {outreach.message_id}
