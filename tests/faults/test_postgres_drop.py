"""PostgreSQL connections dropped mid-run: every backend of the test database but the test's own
is terminated (pg_terminate_backend) several times while outreach flow through the pipeline.

Workers reconnect: a pool that finds one dead connection sweeps the others (config.celery), a
job that could not reach the database goes back to the broker, and one that lost it after its
claim puts its row back itself, with no attempt charged (nurture.tasks, nurture.writing.generation,
nurture.mail.sending).
The mail server is slow to answer DATA, so drops also land between the SMTP call and the
recording of SENT: that is where a lost connection could turn into a second email.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.db.models import Q

from devtools.llm_stub import StubResponse
from devtools.smtp_sink import SMTPSink
from outreach.models import Outreach, State
from tests.e2e.conftest import start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.faults.conftest import StackFactory
from tests.faults.helpers import (
    TimedLLMStub,
    all_in,
    delivery,
    first_sent_after,
    pick,
    sent_events,
    states,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def terminate_other_backends() -> int:
    """Terminate every connection to the test database except this one; return how many."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def test_dropped_database_connections_lose_nothing_and_send_nothing_twice(
    make_stack: StackFactory, stub: TimedLLMStub, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given a run in progress, with a mail server that takes 0.5 s to accept each message
    agent = make_owner(organization=make_org(), daily_limit=10_000)
    ids = [make_outreach(lead=make_lead(owner=agent)).pk for _ in range(pick(12, 40))]
    stub.default = StubResponse(delay_s=0.2)
    smtp_sink.data_delay_s = 0.5
    # (stuck recovery well past a drop's reconnect: a job that lost the database must come back
    # by itself, not through recovery's charged attempt)
    stack = make_stack(DISPATCH_MAX_IN_FLIGHT="4", DISPATCH_STUCK_AFTER_S="30")
    start_pipeline(stack)
    wait_until(lambda: states(ids)[State.SENT] >= 1, timeout_s=30, what="the first SENT", group=stack)
    # when every other connection to the database is terminated, again and again, mid-run
    terminated: list[int] = []
    for _ in range(pick(5, 15)):
        terminated.append(terminate_other_backends())
        time.sleep(1.5)
    last_drop = time.time() - 1.5
    # then the workers recover (none died), and every outreach ends SENT exactly once
    wait_until(all_in(ids, State.SENT), timeout_s=pick(60, 120), what="every outreach SENT", group=stack)
    assert set(sent_events(ids).values()) == {1}
    # and no job was charged an attempt or a send try for the database's failure
    charged = Outreach.objects.filter(pk__in=ids).filter(Q(attempts__gt=0) | Q(send_attempts__gt=1))
    assert list(charged.values_list("pk", "attempts", "send_attempts")) == []
    seen = delivery(smtp_sink, ids)
    assert seen.unique_ids == len(ids)
    assert seen.ids_match_db
    figures.update(
        outreach=len(ids),
        lost=0,
        drops=len(terminated),
        backends_terminated=sum(terminated),
        received=seen.received,
        copies=seen.copies,
        recovery_s=first_sent_after(ids, last_drop),
        llm_requests=len(stub.requests),
        llm_requests_without_faults=3 * len(ids),
    )
    assert seen.copies == 0, f"{seen.copies} email(s) sent twice after a dropped database connection"
