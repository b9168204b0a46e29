"""The send worker under the send budget: real SMTP sink, real Redis, real PostgreSQL."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from devtools.smtp_sink import SMTPSink
from nurture.mail.sending import SEND_ALIGN_S, outreach_send
from orchestrator.budget import Budget, SendGrant, SendRules
from outreach.models import ErrorClass, Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db


def _ready(**fields: Any) -> Outreach:
    """A written draft handed to `send` (by the dispatcher, or by generation for an autonomous owner)."""
    return make_outreach(
        state=State.DISPATCHED, draft_subject="Hello", draft_body="A short body for the test.", **fields
    )


@pytest.fixture
def capped(budget: Budget) -> Budget:
    budget.send_rules = SendRules(domain_daily=1)
    return budget


def test_a_domain_over_its_day_waits_in_approved_saying_why(capped: Budget, smtp_sink: SMTPSink) -> None:
    # given an organization sending from sales.example with a cap of 1 a day, and two drafts
    org = make_org(sender_email="Sales <hello@Sales.Example>")
    owner = make_owner(organization=org)
    first, second = (_ready(lead=make_lead(owner=owner)) for _ in range(2))
    # when both are sent
    assert outreach_send(outreach_id=first.pk, budget=capped) == State.SENT
    assert outreach_send(outreach_id=second.pk, budget=capped) == State.APPROVED
    # then one email left; the other waits for the next UTC day, saying so, not counted as a try
    smtp_sink.wait_for(1)
    second.refresh_from_db()
    assert second.blocked_reason == "sender domain sales.example: 1/day reached, resumes 00:00 UTC"
    tomorrow = datetime.combine(timezone.now().date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    assert abs((second.not_before - tomorrow).total_seconds()) < 5
    assert (second.send_attempts, second.attempts) == (0, 0)
    # and another sender domain has its own day
    other = _ready(lead=make_lead(owner=make_owner(organization=make_org(sender_email="a@other.example"))))
    assert outreach_send(outreach_id=other.pk, budget=capped) == State.SENT


def test_a_send_that_never_left_gives_its_unit_back(capped: Budget, settings: Any) -> None:
    # given nothing listening for SMTP
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", 1, 2
    outreach = _ready()
    # when the send fails before connecting
    assert outreach_send(outreach_id=outreach.pk, budget=capped) == State.APPROVED
    outreach.refresh_from_db()
    assert outreach.error_class == ErrorClass.TRANSIENT
    # then the domain's day still has its one message for the retry
    assert isinstance(capped.reserve_send(domain="example.com"), SendGrant)


def test_a_lost_claim_gives_its_unit_back(capped: Budget, smtp_sink: SMTPSink) -> None:
    # given a draft another delivery already sent
    outreach = make_outreach(state=State.SENT, draft_subject="Hello", draft_body="Body.")
    # when a duplicate delivery of its send task runs
    assert outreach_send(outreach_id=outreach.pk, budget=capped) is None
    # then nothing left and nothing stayed counted
    assert smtp_sink.messages == []
    assert isinstance(capped.reserve_send(domain="example.com"), SendGrant)


def test_sends_are_spaced_at_the_configured_rate(budget: Budget, smtp_sink: SMTPSink) -> None:
    # given 5/s (strict: 4 a second, one every 250 ms) and six drafts
    budget.send_rules = SendRules(per_second=5)
    rows = [_ready() for _ in range(6)]
    # when they are sent one after the other
    for row in rows:
        assert outreach_send(outreach_id=row.pk, budget=budget) == State.SENT
    # then the sink saw them no closer than the budget spaces them
    smtp_sink.wait_for(6)
    times = sorted(smtp_sink.received_at)
    assert len(times) == 6
    assert times[-1] - times[0] >= 5 * 0.25 - 0.05


def test_a_granted_send_leaves_its_alignment_after_the_grant(budget: Budget, smtp_sink: SMTPSink) -> None:
    # given a send budget, and a draft handed to send
    budget.send_rules = SendRules(per_second=5)
    row = _ready()
    # when it is sent
    started = time.time()
    assert outreach_send(outreach_id=row.pk, budget=budget) == State.SENT
    # then it reached the server SEND_ALIGN_S after its grant, not as soon as it was ready
    smtp_sink.wait_for(1)
    assert smtp_sink.received_at[0] - started >= SEND_ALIGN_S
