"""A poison job: the provider fails every call for one lead's prompt (llm_sim's SIM:FAIL_500 marker
in the lead's company). It must end DEAD with a dead letter after RETRY_MAX_ATTEMPTS attempts,
cost exactly one provider call per attempt (the plan call fails, the job stops there), never be
dispatched again, and leave everyone else's outreach alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from config.celery import app
from devtools.llm_sim import MARKER_FAIL_500, LLMSim
from devtools.smtp_sink import SMTPSink
from nurture.errors import TransientError
from nurture.retry_rules import fail
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, OutreachEvent, State
from tests.e2e.conftest import dispatch_cycles, start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.faults.conftest import StackFactory
from tests.faults.helpers import all_in, delivery, pick, sent_events, states

pytestmark = pytest.mark.django_db(transaction=True)

MAX_ATTEMPTS = pick(3, 5)
CALLS_PER_FAILED_ATTEMPT = 1  # plan -> 500: the context and message calls are never made


@pytest.fixture
def sim() -> Iterator[LLMSim]:
    provider = LLMSim(rpm=600, tpm=1_000_000)
    provider.start()
    yield provider
    provider.stop()


@pytest.mark.slow
def test_poison_job_is_dead_lettered_after_the_cap_and_never_loops(
    make_stack: StackFactory, sim: LLMSim, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given one lead whose prompts always make the provider answer 500, among healthy ones
    agent = make_owner(organization=make_org(), daily_limit=10_000)
    poison = make_outreach(lead=make_lead(owner=agent, company=f"Acme {MARKER_FAIL_500}")).pk
    healthy = [make_outreach(lead=make_lead(owner=agent)).pk for _ in range(pick(5, 20))]
    stack = make_stack(llm_base_url=sim.base_url, RETRY_MAX_ATTEMPTS=str(MAX_ATTEMPTS))
    # when the pipeline runs
    start_pipeline(stack)
    wait_until(all_in([poison], State.DEAD), timeout_s=40, what="the poison job DEAD", group=stack)
    wait_until(all_in(healthy, State.SENT), timeout_s=40, what="the healthy outreach SENT", group=stack)
    calls_at_death, cycles_at_death = sim.stats()["marker_errors"], dispatch_cycles(stack)
    # three more dispatch cycles: a looping job would be picked up again
    wait_until(
        lambda: dispatch_cycles(stack) >= cycles_at_death + 3, timeout_s=20, what="3 more cycles", group=stack
    )
    # then it took exactly MAX_ATTEMPTS attempts of one provider call each, and no more
    assert calls_at_death == sim.stats()["marker_errors"] == MAX_ATTEMPTS * CALLS_PER_FAILED_ATTEMPT
    started = OutreachEvent.objects.filter(outreach_id=poison, to_state=State.GENERATING).count()
    assert started == MAX_ATTEMPTS
    assert states([poison])[State.DEAD] == 1
    # and its dead letter says why, with the retry history
    letter = DeadLetter.objects.get(outreach_id=poison)
    assert letter.failure_class == ErrorClass.EXHAUSTED
    assert letter.job_type == "generation"
    assert f"attempt {MAX_ATTEMPTS} of {MAX_ATTEMPTS}" in letter.reason
    assert (
        len([h for h in letter.retry_history if h["error_class"] == ErrorClass.TRANSIENT]) == MAX_ATTEMPTS - 1
    )
    # and the other outreach went out once each
    assert set(sent_events(healthy).values()) == {1}
    seen = delivery(smtp_sink, healthy)
    assert seen.received == seen.unique_ids == len(healthy)
    alerts = (
        stack.log_dir.joinpath("worker-dead_letter.log").read_text().count(f"dead letter: outreach {poison} ")
    )
    figures.update(
        operator_alerts_logged=alerts,
        max_attempts=MAX_ATTEMPTS,
        provider_calls_for_poison=calls_at_death,
        dead_letters=1,
        healthy=len(healthy),
        healthy_sent=len(healthy),
        copies=seen.copies,
        poison_attempts=started,
        total_provider_requests=sim.stats()["requests"],
    )


def test_a_dead_lettered_job_alerts_operators_through_the_dead_letter_queue(
    monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    # given an outreach on its last attempt, whose provider call failed again
    settings.RETRY_MAX_ATTEMPTS = 3
    outreach = make_outreach(state=State.GENERATING, attempts=2)
    published: list[tuple[str, Any]] = []
    monkeypatch.setattr(app, "send_task", lambda name, args=None, **_: published.append((name, args)))
    # when the failure rule is applied (autocommit: on_commit callbacks run at once)
    ended = fail(
        outreach=outreach, from_=State.GENERATING, exc=TransientError("500 again"), job_type="generation"
    )
    # then it is DEAD with a dead letter, and operators are alerted off the hot queues
    assert ended == State.DEAD
    letter = DeadLetter.objects.get(outreach=outreach)
    assert published == [("dead_letter.alert", [letter.pk])]
