"""Lead data never travels in task messages (Redis, hence Flower and its event stream): beyond the
dispatcher (tests/orchestrator/dispatch/test_broker_privacy.py), the send task the generation worker
publishes, the dead-letter alert, and the per-chunk intake tasks of `assign_leads --fan-out`
carry ids only."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import CommandError, call_command

from devtools.llm_stub import LLMStub, StubResponse
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from orchestrator.models import DeadLetter
from outreach.models import AssignmentBatch, Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.orchestrator.dispatch.test_broker_privacy import _redis_texts

pytestmark = pytest.mark.django_db

SECRET_EMAIL = "private.person@secret-prospect.example"
DRAFT_WORD = "Zanzibarquux"  # a word only the generated draft contains


def _dispatched(budget: Budget) -> Outreach:
    lead = make_lead(email=SECRET_EMAIL, first_name="Priscilla", last_name="Private", company="Secretco")
    reservation = budget.reserve(requests=3, tokens=1800)
    assert isinstance(reservation, Reservation)
    return make_outreach(lead=lead, state=State.DISPATCHED, reservation_id=reservation.id)


def _assert_private(client: redis.Redis, *needles: str) -> str:
    everything = "\n".join(_redis_texts(client))
    for needle in needles:
        assert needle not in everything, f"{needle!r} found in Redis"
    return everything


def test_send_task_published_after_generation_carries_only_the_id(
    budget: Budget, redis_client: redis.Redis, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given an autonomous outreach whose draft will contain a distinctive word
    llm_stub.default = StubResponse(
        text=f"Subject: Hello\n\nHi Priscilla, {DRAFT_WORD} is what we do at Acme."
    )
    outreach = _dispatched(budget)
    # when it is generated and the send task is published on commit
    with django_capture_on_commit_callbacks(execute=True):
        assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DISPATCHED
    # then the broker holds one send message with the id, and neither the address nor the draft
    assert redis_client.llen("send") == 1
    everything = _assert_private(
        redis_client, SECRET_EMAIL, "secret-prospect", "Priscilla", "Secretco", DRAFT_WORD
    )
    assert f"[{outreach.pk}]" in everything


def test_dead_letter_alert_carries_only_the_dead_letter_id(
    budget: Budget, redis_client: redis.Redis, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given a generation the provider refuses for good (400), with the lead's data in the error text
    llm_stub.push(StubResponse(status=400, text=f"bad request about {SECRET_EMAIL}"))
    outreach = _dispatched(budget)
    with django_capture_on_commit_callbacks(execute=True):
        assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DEAD
    # then no lead data is in Redis, and the alert on the dead_letter queue names the dead letter
    letter = DeadLetter.objects.get(outreach=outreach)
    everything = _assert_private(redis_client, SECRET_EMAIL, "secret-prospect", "Priscilla")
    assert redis_client.llen("dead_letter") == 1
    assert f"[{letter.pk}]" in everything


def test_assign_leads_fan_out_publishes_ids_only(
    tmp_path: Path, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given a CSV of leads with distinctive data, handed to Celery workers (none running)
    make_owner(organization=make_org(name="Default"), name="Ann")
    path = tmp_path / "leads.csv"
    path.write_text(
        "email,first_name,last_name,company,title,timezone,owner\n"
        f"{SECRET_EMAIL},Priscilla,Private,Secretco,Chief Secret Officer,UTC,Ann\n"
        "other.person@secret-prospect.example,Otto,Other,Secretco,CTO,UTC,Ann\n"
    )
    # when the command fans out (and stops waiting after a moment)
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(CommandError, match="Timed out"):
        call_command(
            "assign_leads",
            str(path),
            "--no-progress",
            "--fan-out",
            "--timeout",
            "0.2",
            stdout=StringIO(),
            stderr=StringIO(),
        )
    # then the chunk tasks on the orchestrator queue carry the batch and row ids, no lead data
    batch = AssignmentBatch.objects.get()
    assert redis_client.llen("orchestrator") >= 1
    everything = _assert_private(
        redis_client, SECRET_EMAIL, "secret-prospect", "Priscilla", "Secretco", "Chief Secret Officer"
    )
    assert f"[{batch.pk}, " in everything
