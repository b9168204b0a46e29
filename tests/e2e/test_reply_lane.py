"""Replies overtake after dispatch too: a reply never waits in the broker behind intros already
handed to a busy generation worker (docs/dispatch.md, "The reply lane"); and with no quiet
period (REPLY_QUIET_S=0) a reply arriving into thousands of queued intros is mailed within
seconds (docs/dispatch.md, "The quiet period")."""

from __future__ import annotations

import dataclasses
import json
import time
from datetime import datetime
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from devtools.llm_stub import LLMStub, StubResponse, triage_answered
from devtools.processes import ProcessGroup
from devtools.smtp_sink import SMTPSink
from nurture.intake.replies import signature_header
from outreach.idempotency import intro_key
from outreach.models import Lead, Outreach, OutreachEvent, Owner, State
from tests.conftest import WEBHOOK_SECRET
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
    inbound = {
        "subject": "Re: hello",
        "body": "Sounds good, tell me more.",
        "message_id": "<r@prospect.example>",
    }
    reply = make_outreach(lead=make_lead(owner=owner), kind=Outreach.Kind.REPLY, context={"inbound": inbound})
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


BACKLOG = 3000  # intros queued ahead of the reply, over three owners
MODEL_S = 0.3  # each provider call
MAILED_WITHIN_S = 10.0


def _backlog(owners: list[Owner], *, per_owner: int) -> None:
    """`per_owner` leads for each owner, each with its intro queued and due now (bulk rows)."""
    now = timezone.now()
    leads = Lead.objects.bulk_create(
        Lead(
            organization_id=owner.organization_id,
            owner=owner,
            email=f"backlog{owner.pk}-{i}@prospect.example",
            first_name="Pat",
            last_name=f"Backlog{i}",
            company="Acme",
        )
        for owner in owners
        for i in range(per_owner)
    )
    Outreach.objects.bulk_create(
        Outreach(
            lead=lead,
            owner_id=lead.owner_id,
            kind=Outreach.Kind.INTRO,
            tier=Outreach.KIND_TIER[Outreach.Kind.INTRO],
            not_before=now,
            idempotency_key=intro_key(lead_id=lead.pk),
            state_changed_at=now,
        )
        for lead in leads
    )


def _reply_by_webhook(lead: Lead) -> None:
    raw = json.dumps(
        {
            "lead_email": lead.email,
            "message_id": "<a-question@prospect.example>",
            "subject": "Re: hi",
            "body": "Price?",
        }
    ).encode()
    header = signature_header(body=raw, secret=WEBHOOK_SECRET, timestamp=int(time.time()))
    response = Client().post(
        "/hooks/replies/", data=raw, content_type="application/json", headers={"X-Signature": header}
    )
    assert response.status_code == 202, response.content


def test_with_no_quiet_period_a_reply_into_thousands_of_intros_is_mailed_within_ten_seconds(
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink, webhook_secret: str, settings: Any
) -> None:
    # given answers at once (REPLY_QUIET_S=0, here and in the workers), a 300 ms model (the
    # reply's triage call too: the stub answers it apart from the queue, at once unless told),
    # the product's default budget, and thousands of intros queued, the pipeline busy with them
    settings.REPLY_QUIET_S = 0
    stack.env["REPLY_QUIET_S"] = "0"
    llm_stub.default = StubResponse(delay_s=MODEL_S)
    llm_stub.triage = lambda request: dataclasses.replace(triage_answered(request), delay_s=MODEL_S)
    owners = [make_owner(organization=make_org(), daily_limit=10_000) for _ in range(3)]
    _backlog(owners, per_owner=BACKLOG // len(owners))
    start_pipeline(stack)
    wait_until(
        lambda: Outreach.objects.filter(kind=Outreach.Kind.INTRO, state=State.SENT).exists(),
        timeout_s=90,
        what="the first intro sent",
        group=stack,
    )
    lead = make_lead(owner=owners[0])
    # when one of the owners' leads replies, through the signed webhook
    arrived = time.monotonic()
    _reply_by_webhook(lead)
    wait_until(
        lambda: any(m.rcpt_tos[0] == lead.email for m in smtp_sink.messages),
        timeout_s=3 * MAILED_WITHIN_S,
        what="the answer mailed",
        group=stack,
    )
    mailed_s = time.monotonic() - arrived
    # then it was mailed within ten seconds, with thousands of intros still waiting behind it
    waiting = Outreach.objects.filter(kind=Outreach.Kind.INTRO, state=State.QUEUED).count()
    print(f"answer mailed {mailed_s:.1f} s after the reply arrived; {waiting} intros still queued")
    assert mailed_s <= MAILED_WITHIN_S, f"the answer took {mailed_s:.1f} s"
    assert waiting >= BACKLOG - 500, f"only {waiting} intros were still waiting: no backlog to overtake"
