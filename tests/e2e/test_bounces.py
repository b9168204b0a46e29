"""A real mail server refusing an address at RCPT, with real workers: the lead is suppressed
and its email cancelled, never retried nor dead-lettered (docs/email.md, "Bounces and complaints")."""

from __future__ import annotations

import pytest

from devtools.llm_stub import LLMStub
from devtools.processes import ProcessGroup
from devtools.smtp_sink import SMTPSink
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Lead, Outreach, State
from tests.e2e.conftest import dispatch_cycles, start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_5xx_at_rcpt_suppresses_the_lead_without_a_retry(
    stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given three intros, one to an address the mail server refuses for good, with a nudge queued
    owner = make_owner(organization=make_org(), daily_limit=1000)
    good = [make_outreach(lead=make_lead(owner=owner)) for _ in range(2)]
    refused_lead = make_lead(owner=owner)
    smtp_sink.refusals[refused_lead.email] = f"550 5.1.1 <{refused_lead.email}>: Recipient address rejected"
    refused = make_outreach(lead=refused_lead)
    nudge = make_outreach(lead=refused_lead, kind=Outreach.Kind.NUDGE, step=1)
    # when the pipeline runs
    start_pipeline(stack)
    wait_until(
        lambda: Outreach.objects.filter(pk__in=[o.pk for o in good], state=State.SENT).count() == 2,
        timeout_s=90,
        what="the two deliverable intros sent",
        group=stack,
    )
    wait_until(
        lambda: Outreach.objects.filter(pk=refused.pk, state=State.CANCELLED).exists(),
        timeout_s=60,
        what="the refused intro cancelled",
        group=stack,
    )
    cycles_at_cancel = dispatch_cycles(stack)  # several more cycles: a retry would show by then
    wait_until(
        lambda: dispatch_cycles(stack) >= cycles_at_cancel + 3,
        timeout_s=30,
        what="3 more dispatch cycles",
        group=stack,
    )
    # then the lead is undeliverable, its nudge cancelled, its intro tried once and never again
    row = Outreach.objects.get(pk=refused.pk)
    assert (row.state, row.error_class, row.attempts) == (State.CANCELLED, ErrorClass.PERMANENT, 0)
    assert row.events.filter(to_state=State.SENDING).count() == 1
    assert Lead.objects.get(pk=refused_lead.pk).status == Lead.Status.BOUNCED
    assert Outreach.objects.get(pk=nudge.pk).state == State.CANCELLED
    assert not DeadLetter.objects.exists()
    assert sorted(m.rcpt_tos[0] for m in smtp_sink.messages) == sorted(o.lead.email for o in good)
