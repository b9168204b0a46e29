"""Replies overtake after dispatch too: a reply never waits in the broker behind intros already
handed to a busy generation worker (docs/dispatch.md, "The reply lane")."""

from __future__ import annotations

import time
from datetime import datetime

import pytest

from devtools.llm_stub import LLMStub, StubResponse
from devtools.processes import ProcessGroup
from devtools.smtp_sink import SMTPSink
from outreach.models import Outreach, OutreachEvent, State
from tests.e2e.conftest import start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

CALL_S = 1.0  # the slow provider: 3 calls, so 3 s of generation per outreach
INTROS = 16  # 2 generation processes x 3 s each: a backlog of ~24 s
INTERVAL_S = 1.0  # the e2e stack's DISPATCH_INTERVAL (tests/e2e/conftest.py)
SLACK_S = 2.0  # process start-up and a loaded 2-core machine


def _started(outreach_id: int) -> datetime | None:
    event = OutreachEvent.objects.filter(outreach_id=outreach_id, to_state=State.GENERATING).first()
    return event.at if event else None


def test_a_reply_dispatched_after_a_backlog_of_intros_starts_before_them(
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given a slow provider and a backlog of intros already dispatched to the generation tier
    # (a budget roomy enough that the first cycle hands them all to the broker)
    llm_stub.default = StubResponse(delay_s=CALL_S)
    stack.env |= {"LLM_RPM": "6000", "LLM_TPM": "10000000"}
    owner = make_owner(organization=make_org(), daily_limit=1000)
    intros = [make_outreach(lead=make_lead(owner=owner)).pk for _ in range(INTROS)]
    start_pipeline(stack)
    wait_until(
        lambda: not Outreach.objects.filter(pk__in=intros, state=State.QUEUED).exists(),
        timeout_s=60,
        what="every intro dispatched",
        group=stack,
    )
    # when a reply comes in after them
    reply = make_outreach(lead=make_lead(owner=owner), kind=Outreach.Kind.REPLY)
    arrived = time.monotonic()
    wait_until(lambda: _started(reply.pk) is not None, timeout_s=60, what="the reply to start", group=stack)
    waited_s = time.monotonic() - arrived
    wait_until(
        lambda: Outreach.objects.filter(pk=reply.pk, state=State.SENT).exists(),
        timeout_s=30,
        what="the reply sent",
        group=stack,
    )
    # then it started within two dispatch intervals, not after the intros ahead of it in time
    started = _started(reply.pk)
    assert started is not None
    overtaken = [i for i in intros if (_started(i) or datetime.max.replace(tzinfo=started.tzinfo)) > started]
    assert waited_s <= 2 * INTERVAL_S + SLACK_S, f"the reply waited {waited_s:.1f} s to start"
    assert len(overtaken) >= INTROS // 2, f"the reply overtook only {len(overtaken)} intros"
