"""A SENDING row whose worker died: the mail server may have the email. It is resent once (same
Message-ID); if that try dies too it becomes a "possibly sent" dead letter for a person, never
a loop that emails the prospect every DISPATCH_STUCK_AFTER_S."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
from django.utils import timezone

from orchestrator.failures.recovery import recover_stuck
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Outreach, State
from outreach.transitions import transition
from tests.factories import make_outreach

pytestmark = pytest.mark.django_db

DRAFT: dict[str, Any] = {
    "draft_subject": "Hi",
    "draft_body": "Hello",
    "message_id": "<outreach-1.abc@seller.example>",
}


@pytest.fixture(autouse=True)
def _timings(settings: Any) -> None:
    settings.DISPATCH_STUCK_AFTER_S = 600
    settings.RETRY_MAX_ATTEMPTS = 5


def _stuck_in_sending(row: Outreach) -> None:
    """What outreach_send does before SMTP, then its worker dies: the row stays SENDING."""
    transition(outreach_id=row.pk, from_=State.APPROVED, to=State.DISPATCHED)
    from nurture.mail.sending import sending_claim

    sending_claim(outreach_id=row.pk, message_id=row.message_id)
    Outreach.objects.filter(pk=row.pk).update(state_changed_at=timezone.now() - timedelta(seconds=700))


def _recover(client: redis.Redis) -> None:
    recover_stuck(now=timezone.now(), refund=lambda _: None, leases=client)


def test_first_death_in_sending_is_resent_once_with_the_same_message_id(redis_client: redis.Redis) -> None:
    # given an approved draft whose send worker died after claiming it
    row = make_outreach(state=State.APPROVED, **DRAFT)
    _stuck_in_sending(row)
    # when recovery runs
    _recover(redis_client)
    # then it goes back to the send path, keeping its Message-ID, one unconfirmed try counted
    row.refresh_from_db()
    assert (row.state, row.send_attempts, row.message_id) == (State.APPROVED, 1, DRAFT["message_id"])


def test_second_death_in_sending_is_a_possibly_sent_dead_letter_not_a_loop(redis_client: redis.Redis) -> None:
    # given a draft whose send worker died, was resent, and died again
    row = make_outreach(state=State.APPROVED, **DRAFT)
    _stuck_in_sending(row)
    _recover(redis_client)
    _stuck_in_sending(row)
    # when recovery runs again
    _recover(redis_client)
    # then it is DEAD with a dead letter of its own class that asks a person to confirm
    row.refresh_from_db()
    assert (row.state, row.send_attempts) == (State.DEAD, 2)
    letter = DeadLetter.objects.get(outreach=row)
    assert letter.failure_class == ErrorClass.POSSIBLY_SENT
    assert "may have been sent 2 times" in letter.reason
    assert "Confirm whether the prospect got it" in letter.suggested_action
    # and a later cycle leaves it there: never a third email
    _recover(redis_client)
    row.refresh_from_db()
    assert row.state == State.DEAD


def test_possibly_sent_replayed_by_a_person_gets_one_more_try_only(redis_client: redis.Redis) -> None:
    # given a possibly-sent letter a person replayed after checking the prospect never got it
    from orchestrator.failures.dead_letters import dead_letter_replay

    row = make_outreach(state=State.APPROVED, **DRAFT)
    for _ in range(2):
        _stuck_in_sending(row)
        _recover(redis_client)
    dead_letter_replay(dead_letter=DeadLetter.objects.get(outreach=row))
    # when that send dies too
    _stuck_in_sending(row)
    _recover(redis_client)
    # then it is back with a person at once
    row.refresh_from_db()
    assert row.state == State.DEAD
    assert DeadLetter.objects.filter(outreach=row, failure_class=ErrorClass.POSSIBLY_SENT).count() == 2
