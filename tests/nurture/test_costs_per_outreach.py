"""What one outreach costs the stores, counted (docs/scaling.md cites these figures): the
PostgreSQL statements and Redis round trips of its generation job (three LLM calls) and of its
send, each called as its task calls it. Round trips are counted where redis-py sends them
(a pipeline is one), in this thread only: a lease heartbeat beating beside the job is not the
job's cost.

The generation job's 8: one per LLM call (its pacer slot, carrying the answer before it), and
five a job however many calls it makes (its lease taken and dropped, the settlement carrying
the last answer, the answers' health and latency, the owner's learned tokens)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date
from typing import Any

import pytest
import redis.connection
from django.db import connection
from django.test.utils import CaptureQueriesContext

from devtools.llm_stub import LLMStub
from devtools.smtp_sink import SMTPSink
from nurture.mail.sending import outreach_send
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation, SendRules
from outreach.models import Mailbox, Outreach, State, VerifiedDomain
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db

# Update docs/scaling.md ("What one outreach costs") with these when they change.
GENERATION = {"statements": 8, "writes": 2, "redis_round_trips": 8}
SEND = {"statements": 9, "writes": 3, "redis_round_trips": 2}
WRITES = {"INSERT", "UPDATE", "DELETE"}


@contextmanager
def redis_round_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts what this thread sends to Redis: one per command or pipeline."""
    counted: Counter[str] = Counter()
    send = redis.connection.AbstractConnection.send_packed_command
    here = threading.get_ident()

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        if threading.get_ident() == here:
            counted["round_trips"] += 1
        send(self, command, check_health)

    with monkeypatch.context() as patch:
        patch.setattr(redis.connection.AbstractConnection, "send_packed_command", counting)
        yield counted


def _figures(queries: CaptureQueriesContext, trips: Counter[str]) -> dict[str, int]:
    words = [q["sql"].upper().replace("FOR UPDATE", "").split() for q in queries.captured_queries]
    verbs = Counter(w[0] for w in words)
    return {
        "statements": sum(n for verb, n in verbs.items() if "SAVEPOINT" not in verb and verb != "RELEASE"),
        # led by its verb, or a WITH that writes (a send's counters: the owner's row and the
        # other series in one statement)
        "writes": sum(1 for w in words if w[0] in WRITES or (w[0] == "WITH" and WRITES.intersection(w))),
        "redis_round_trips": trips["round_trips"],
    }


def _dispatched(budget: Budget) -> Outreach:
    """An autonomous owner's intro as the dispatcher leaves it: DISPATCHED, reserved."""
    reservation = budget.reserve(requests=3, tokens=1800)
    assert isinstance(reservation, Reservation)
    return make_outreach(state=State.DISPATCHED, reservation_id=reservation.id)


def test_one_outreach_costs_these_statements_and_round_trips(
    budget: Budget,
    llm_stub: LLMStub,
    smtp_sink: SMTPSink,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given a mail provider's limits (the send budget in Redis), and a worker that has run one
    # outreach already (its connections open, as in production)
    budget.send_rules = SendRules(per_second=10, domain_daily=1000)
    first, outreach = _dispatched(budget), _dispatched(budget)
    with django_capture_on_commit_callbacks():
        outreach_generate(outreach_id=first.pk, budget=budget)
    outreach_send(outreach_id=first.pk, budget=budget)
    # when the next one's generation job runs (three LLM calls), then its send
    with (
        CaptureQueriesContext(connection) as generation_sql,
        redis_round_trips(monkeypatch) as generation_trips,
        django_capture_on_commit_callbacks(),
    ):
        assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DISPATCHED
    with CaptureQueriesContext(connection) as send_sql, redis_round_trips(monkeypatch) as send_trips:
        assert outreach_send(outreach_id=outreach.pk, budget=budget) == State.SENT
    # then each costs what docs/scaling.md says
    assert len(llm_stub.requests) == 6
    assert _figures(generation_sql, generation_trips) == GENERATION
    assert _figures(send_sql, send_trips) == SEND


def test_a_send_from_an_owner_s_mailbox_reads_no_more_than_one_from_the_organization_s_sender(
    budget: Budget, smtp_sink: SMTPSink
) -> None:
    # given an owner who sends from two mailboxes of its own, and a send worker that has sent once
    budget.send_rules = SendRules(per_second=10, domain_daily=1000)
    owner = make_owner(organization=make_org(sender_email="team@corp.example"))
    VerifiedDomain.objects.create(organization=owner.organization, domain="corp.example")
    for name in ("ann", "bob"):
        box = Mailbox.objects.create(
            organization=owner.organization,
            address=f"{name}@corp.example",
            daily_cap=40,
            ramp_from=date(2026, 1, 1),
            min_spacing_s=0,
            max_spacing_s=0,
        )
        box.owners.add(owner)
    first, outreach = (
        make_outreach(
            lead=make_lead(owner=owner), state=State.DISPATCHED, draft_subject="Hi", draft_body="A body."
        )
        for _ in range(2)
    )
    assert outreach_send(outreach_id=first.pk, budget=budget) == State.SENT
    # when the next one is sent
    with CaptureQueriesContext(connection) as send_sql:
        assert outreach_send(outreach_id=outreach.pk, budget=budget) == State.SENT
    # then the mailbox it chose was read with the owner's mailboxes, not once more
    sent = Outreach.objects.select_related("mailbox").get(pk=outreach.pk)
    assert sent.mailbox is not None
    assert sent.mailbox_id != Outreach.objects.get(pk=first.pk).mailbox_id  # the owner's other one
    assert sent.mailbox.address in smtp_sink.wait_for(2)[-1].mail_from
    assert _figures(send_sql, Counter())["statements"] == SEND["statements"]
