"""The triage table (cases.py): every email gets its class, and its class's action.

Against the rules alone (pure), then through intake and the reply's generation job with
llm_sim answering the one triage call: the rules' rows make no request at the simulator.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from devtools.llm_sim import LLMSim
from nurture.intake.belief import InboundReply
from nurture.intake.replies import NotBelieved, reply_receive
from nurture.intake.triage.rules import triage_rules
from nurture.reply_actions import resume_at
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from outreach.models import Lead, Outreach, ReferralProposal, State, UnverifiedInbound
from outreach.transitions import transition
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.nurture.intake.triage.cases import CASES, TODAY, Case

OURS = "<outreach-1.abc@seller.example>"


def _reply(case: Case, *, lead_email: str, n: int) -> InboundReply:
    failed = tuple(lead_email if r == "lead" else r for r in case.report_failed)
    return InboundReply(
        lead_email=case.sender or lead_email,
        message_id=f"<triage-{n}@prospect.example>",
        subject=case.subject,
        body=case.body,
        in_reply_to=OURS,
        provider="mailgun",
        headers=case.headers,
        content_type=case.content_type,
        report_type=case.report_type,
        report_failed=failed,
    )


def test_the_table_has_forty_emails_and_both_kinds_of_decision() -> None:
    assert len(CASES) >= 40
    assert {case.by for case in CASES} == {"rules", "model"}
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_the_rules_settle_exactly_their_rows(case: Case) -> None:
    # when the rules read the email
    found = triage_rules(reply=_reply(case, lead_email="pat@prospect.example", n=0), today=TODAY)
    # then the rules' rows get their class (and return date), the others are left to the model
    if case.by == "model":
        assert found is None, found
        return
    assert found is not None
    assert (found.reply_class, found.return_date) == (case.expected, case.back)


@pytest.fixture
def sim(settings: Any) -> Iterator[LLMSim]:
    sim = LLMSim(rpm=100_000, tpm=100_000_000, window_s=60.0, latency_ms=0)
    sim.start()
    settings.LLM_BASE_URL, settings.LLM_API_KEY = sim.base_url, "sk-test"
    settings.LLM_MODEL, settings.LLM_TIMEOUT_S = "sim-1", 5.0
    yield sim
    sim.stop()


@pytest.mark.django_db
def test_every_email_gets_its_class_and_action_and_only_the_models_rows_ask_llm_sim(
    sim: LLMSim, budget: Budget
) -> None:
    owner = make_owner(organization=make_org(), review_required=False)  # autonomous
    wrong = []
    for n, case in enumerate(CASES):
        # given a lead we wrote to, whose next nudge is due in two days
        lead = make_lead(owner=owner)
        make_outreach(lead=lead, state=State.SENT, message_id=OURS if n == 0 else f"<o-{n}@seller.example>")
        nudge = make_outreach(
            lead=lead, kind=Outreach.Kind.NUDGE, step=1, not_before=timezone.now() + timedelta(days=2)
        )
        reply = _reply(case, lead_email=lead.email, n=n)
        reply = InboundReply(
            **{**reply.__dict__, "in_reply_to": OURS if n == 0 else f"<o-{n}@seller.example>"}
        )
        before = sim.stats()["requests"]
        # when it arrives, and (if queued) its generation job runs
        if case.action == "held":
            with pytest.raises(NotBelieved):
                reply_receive(reply=reply)
            assert UnverifiedInbound.objects.filter(lead=lead).exists(), case.name
            continue
        outreach_id = reply_receive(reply=reply).outreach_id
        if case.by == "rules":
            asked = sim.stats()["requests"] - before
        else:
            _dispatch(budget, outreach_id)
            outreach_generate(outreach_id=outreach_id, budget=budget)
            asked = sim.stats()["requests"] - before
        # then it has its class, who decided, and the action happened
        row = Outreach.objects.get(pk=outreach_id)
        problems = _check(case, row=row, lead=lead, nudge=nudge, asked=asked)
        if problems:
            wrong.append(f"{case.name}: {problems}")
    assert wrong == []


def _check(case: Case, *, row: Outreach, lead: Lead, nudge: Outreach, asked: int) -> list[str]:
    lead.refresh_from_db()
    nudge.refresh_from_db()
    problems = []
    if (row.reply_class, row.reply_class_by) != (case.expected, case.by):
        problems.append(f"class {row.reply_class} by {row.reply_class_by} ({row.reply_class_reason})")
    if case.by == "rules" and asked:
        problems.append(f"{asked} LLM request(s) for a rule-decided email")
    writing_calls = 3 if case.action in ("sent", "person") else 0
    if case.by == "model" and asked != 1 + writing_calls:
        problems.append(f"{asked} LLM requests, expected the triage call and {writing_calls} more")
    if not _action_done(case, row=row, lead=lead, nudge=nudge):
        problems.append(
            f"action {case.action} not done: reply {row.state}, lead {lead.status}, nudge {nudge.state}"
        )
    return problems


def _action_done(case: Case, *, row: Outreach, lead: Lead, nudge: Outreach) -> bool:
    action = case.action
    if action == "sent":
        return row.state == State.DISPATCHED
    if action == "person":
        return row.state == State.AWAITING_APPROVAL and bool(row.draft_body)
    if action == "suppressed":
        return row.state == State.CANCELLED and lead.status == Lead.Status.BOUNCED
    if action == "opted_out":
        return row.state == State.CANCELLED and lead.status == Lead.Status.OPTED_OUT
    if action == "no_answer":
        return (
            row.state == State.CANCELLED and lead.status == Lead.Status.ACTIVE and nudge.state == State.QUEUED
        )
    if action == "stopped":
        return (
            row.state == State.CANCELLED
            and lead.status == Lead.Status.REPLIED
            and nudge.state == State.CANCELLED
        )
    if action == "referral":
        proposals = list(ReferralProposal.objects.filter(source=row))
        return (
            row.state == State.CANCELLED
            and [p.contact_email for p in proposals] == [case.referral]
            and not Lead.objects.filter(email=case.referral or "-").exists()
        )
    assert action == "ooo_moved", action
    after = resume_at(return_date=case.back, now=timezone.now()) - timedelta(minutes=1)
    next_nudge = Outreach.objects.filter(lead=lead, kind=Outreach.Kind.NUDGE, state=State.QUEUED).get()
    return (
        row.state == State.CANCELLED and lead.status == Lead.Status.ACTIVE and next_nudge.not_before >= after
    )


def _dispatch(budget: Budget, outreach_id: int) -> None:
    """What the dispatcher does to a queued reply: a reservation, then QUEUED -> DISPATCHED."""
    reservation = budget.reserve(requests=4, tokens=2400)
    assert isinstance(reservation, Reservation)
    transition(
        outreach_id=outreach_id, from_=State.QUEUED, to=State.DISPATCHED, reservation_id=reservation.id
    )
