from __future__ import annotations

import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from orchestrator.failures.dead_letters import (
    SUGGESTED_ACTION,
    DeadLetterNotActionable,
    dead_letter,
    dead_letter_cancel,
    dead_letter_escalate,
    dead_letter_replay,
    replay_outcome_success,
    replay_success_rate,
)
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Outreach, OutreachEvent, State
from outreach.transitions import transition
from tests.factories import make_outreach, make_user

pytestmark = pytest.mark.django_db

MESSAGE_ID = "<outreach-1.abc@seller.example>"


def _generation_failure(*, failure_class: ErrorClass = ErrorClass.EXHAUSTED) -> DeadLetter:
    """An outreach that was retried once after a transient error, then died while generating."""
    outreach = make_outreach()
    _run(outreach=outreach, to=State.GENERATING)
    transition(
        outreach_id=outreach.pk,
        from_=State.GENERATING,
        to=State.QUEUED,
        error_class=ErrorClass.TRANSIENT,
        note="HTTP 503",
        attempts=1,
        not_before=timezone.now(),
    )
    _run(outreach=outreach, to=State.GENERATING)
    return dead_letter(
        outreach=outreach,
        from_=State.GENERATING,
        failure_class=failure_class,
        reason="HTTP 503 x3",
        job_type="generation",
    )


def _send_failure() -> DeadLetter:
    """A written (and approved) draft whose SMTP send failed for good."""
    outreach = make_outreach(
        state=State.SENDING,
        draft_subject="Hi Pat",
        draft_body="A short note.",
        message_id=MESSAGE_ID,
        attempts=3,
    )
    return dead_letter(
        outreach=outreach,
        from_=State.SENDING,
        failure_class=ErrorClass.EXHAUSTED,
        reason="SMTP 451 x3",
        job_type="send",
    )


def _run(*, outreach: Outreach, to: State) -> None:
    transition(outreach_id=outreach.pk, from_=State.QUEUED, to=State.DISPATCHED)
    transition(outreach_id=outreach.pk, from_=State.DISPATCHED, to=to)


def _command(*args: str) -> str:
    out = StringIO()
    call_command("replay_dead_letters", *args, stdout=out)
    return out.getvalue()


# --- dead-lettering ---------------------------------------------------------------------------


def test_dead_lettering_writes_record_with_history_and_suggested_action() -> None:
    # given / when an outreach retried once then died
    letter = _generation_failure()
    # then it is DEAD and the letter carries everything an operator needs
    outreach = letter.outreach
    outreach.refresh_from_db()
    assert (outreach.state, outreach.last_error) == (State.DEAD, "HTTP 503 x3")
    assert (letter.status, letter.job_type, letter.failure_class) == (
        "open",
        "generation",
        ErrorClass.EXHAUSTED,
    )
    assert letter.payload == {
        "outreach_id": outreach.pk,
        "idempotency_key": outreach.idempotency_key,
        "kind": outreach.kind,
    }
    assert [h["error_class"] for h in letter.retry_history] == [ErrorClass.TRANSIENT, ErrorClass.EXHAUSTED]
    assert letter.retry_history[0]["note"] == "HTTP 503"
    assert letter.suggested_action == SUGGESTED_ACTION[ErrorClass.EXHAUSTED]
    assert (letter.lead_id_ref, letter.owner_id_ref) == (outreach.lead_id, outreach.owner_id)
    assert letter.organization_id_ref == outreach.lead.organization_id
    assert letter.first_failed_at is not None


# --- replay -----------------------------------------------------------------------------------


def test_replay_without_draft_requeues_with_fresh_attempts_and_same_key() -> None:
    # given a generation failure
    letter = _generation_failure()
    key = letter.outreach.idempotency_key
    before = timezone.now()
    # when an operator replays it
    outreach = dead_letter_replay(dead_letter=letter, by_id=None)
    # then it is queued to run now with a fresh retry budget, under its original key
    assert outreach.state == State.QUEUED
    assert (outreach.attempts, outreach.last_error, outreach.error_class, outreach.blocked_reason) == (
        0,
        "",
        "",
        "",
    )
    assert outreach.not_before >= before
    assert outreach.idempotency_key == key
    letter.refresh_from_db()
    assert (letter.status, letter.replay_succeeded) == (DeadLetter.Status.REPLAYED, None)
    assert letter.resolved_at is not None
    event = OutreachEvent.objects.filter(outreach=outreach).last()
    assert event is not None
    assert (event.from_state, event.to_state) == (State.DEAD, State.QUEUED)


def test_replay_with_draft_goes_to_approved_keeping_message_id() -> None:
    # given a send failure: the draft exists, so the LLM must not be paid again
    letter = _send_failure()
    key = letter.outreach.idempotency_key
    # when replayed
    outreach = dead_letter_replay(dead_letter=letter)
    # then it goes straight to the approved-send path with the same key and Message-ID
    assert (outreach.state, outreach.attempts) == (State.APPROVED, 0)
    assert (outreach.idempotency_key, outreach.message_id) == (key, MESSAGE_ID)
    assert outreach.draft_body == "A short note."


def test_replay_of_policy_failure_regenerates_instead_of_sending_the_draft() -> None:
    # given a draft that failed the policy check and was dead-lettered with it
    outreach = make_outreach(state=State.GENERATING, draft_subject="Hi", draft_body="Visit {{link}}")
    letter = dead_letter(
        outreach=outreach,
        from_=State.GENERATING,
        failure_class=ErrorClass.POLICY,
        reason="unfilled placeholder",
        job_type="generation",
    )
    # when replayed
    replayed = dead_letter_replay(dead_letter=letter)
    # then it is regenerated (QUEUED) and the failing draft can no longer be mistaken for a sendable one
    assert (replayed.state, replayed.draft_subject, replayed.draft_body) == (State.QUEUED, "", "")


def test_replay_records_who_replayed() -> None:
    user = make_user("ops")
    letter = _generation_failure()
    dead_letter_replay(dead_letter=letter, by_id=user.pk)
    letter.refresh_from_db()
    assert letter.resolved_by == user
    assert OutreachEvent.objects.filter(outreach=letter.outreach, actor=user, to_state=State.QUEUED).exists()


def test_replay_of_a_replayed_letter_refuses_naming_id_and_status() -> None:
    # given a letter already replayed
    letter = _generation_failure()
    dead_letter_replay(dead_letter=letter)
    # when it is replayed again (with a stale instance still saying "open")
    # then it is refused, nothing moves
    with pytest.raises(DeadLetterNotActionable, match=rf"#{letter.pk}: it is replayed") as info:
        dead_letter_replay(dead_letter=letter)
    assert isinstance(info.value, ValueError)
    assert (info.value.dead_letter_id, info.value.status) == (letter.pk, "replayed")
    assert Outreach.objects.get(pk=letter.outreach_id).state == State.QUEUED


def test_replay_when_outreach_is_no_longer_dead_refuses_and_keeps_letter_open() -> None:
    # given an open letter whose outreach was cancelled elsewhere (an opt-out)
    letter = _generation_failure()
    transition(outreach_id=letter.outreach_id, from_=State.DEAD, to=State.CANCELLED)
    # when replayed / then refused with the outreach's state, and the letter stays open
    with pytest.raises(DeadLetterNotActionable, match=rf"outreach {letter.outreach_id} is cancelled"):
        dead_letter_replay(dead_letter=letter)
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.OPEN


@pytest.mark.django_db(transaction=True)
def test_concurrent_replays_of_one_letter_replay_it_once() -> None:
    # given one open letter and two operators replaying it at the same moment
    letter = _generation_failure()
    barrier, outcomes = threading.Barrier(2), []

    def replay() -> None:
        barrier.wait()
        try:
            dead_letter_replay(dead_letter=letter)
            outcomes.append("replayed")
        except DeadLetterNotActionable:
            outcomes.append("refused")
        finally:
            connection.close()

    threads = [threading.Thread(target=replay) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # then exactly one wins and the outreach moved once
    assert sorted(outcomes) == ["refused", "replayed"]
    assert OutreachEvent.objects.filter(outreach_id=letter.outreach_id, from_state=State.DEAD).count() == 1


# --- cancel and escalate ----------------------------------------------------------------------


def test_cancel_moves_outreach_to_cancelled_and_closes_letter() -> None:
    letter = _generation_failure()
    dead_letter_cancel(dead_letter=letter)
    letter.refresh_from_db()
    assert letter.status == DeadLetter.Status.CANCELLED
    assert letter.resolved_at is not None
    assert Outreach.objects.get(pk=letter.outreach_id).state == State.CANCELLED


def test_cancel_of_an_outreach_already_cancelled_only_closes_the_letter() -> None:
    letter = _generation_failure()
    transition(outreach_id=letter.outreach_id, from_=State.DEAD, to=State.CANCELLED)
    assert dead_letter_cancel(dead_letter=letter).status == DeadLetter.Status.CANCELLED


def test_cancel_of_a_cancelled_letter_refuses() -> None:
    letter = _generation_failure()
    dead_letter_cancel(dead_letter=letter)
    with pytest.raises(DeadLetterNotActionable, match="it is cancelled"):
        dead_letter_cancel(dead_letter=letter)


def test_escalate_keeps_outreach_dead_and_records_the_note() -> None:
    # given an open letter
    letter = _generation_failure()
    # when escalated with a note
    escalated = dead_letter_escalate(dead_letter=letter, by_id=None, note="provider key revoked? ask finance")
    # then the letter says so, the outreach stays DEAD
    assert escalated.status == DeadLetter.Status.ESCALATED
    letter.refresh_from_db()
    assert letter.reason.startswith("HTTP 503 x3\n[escalated ")
    assert letter.reason.endswith("by system] provider key revoked? ask finance")
    assert Outreach.objects.get(pk=letter.outreach_id).state == State.DEAD


def test_escalated_letter_can_still_be_replayed_but_not_escalated_again() -> None:
    letter = _generation_failure()
    dead_letter_escalate(dead_letter=letter)
    with pytest.raises(DeadLetterNotActionable, match="it is escalated"):
        dead_letter_escalate(dead_letter=letter)
    assert dead_letter_replay(dead_letter=letter).state == State.QUEUED


# --- replay success tracking ------------------------------------------------------------------


def test_replay_then_dying_again_marks_the_replay_failed() -> None:
    # given a replayed generation failure
    first = _generation_failure()
    dead_letter_replay(dead_letter=first)
    # when the outreach dies again
    _run(outreach=first.outreach, to=State.GENERATING)
    second = dead_letter(
        outreach=first.outreach,
        from_=State.GENERATING,
        failure_class=ErrorClass.PERMANENT,
        reason="HTTP 401",
        job_type="generation",
    )
    # then the replay counts as failed and a new open letter waits
    first.refresh_from_db()
    assert first.replay_succeeded is False
    assert (second.status, second.replay_succeeded) == (DeadLetter.Status.OPEN, None)


def test_replay_then_success_marks_the_replay_succeeded() -> None:
    letter = _send_failure()
    dead_letter_replay(dead_letter=letter)
    replay_outcome_success(outreach_id=letter.outreach_id)
    letter.refresh_from_db()
    assert letter.replay_succeeded is True


def test_success_of_an_outreach_never_replayed_marks_nothing() -> None:
    letter = _send_failure()  # open, not replayed
    replay_outcome_success(outreach_id=letter.outreach_id)
    letter.refresh_from_db()
    assert letter.replay_succeeded is None


def test_replay_success_rate_counts_finished_replays_only() -> None:
    # given no finished replay
    assert replay_success_rate() is None
    # given three replays: two succeeded, one died again, and one still pending
    for _ in range(2):
        ok = _send_failure()
        dead_letter_replay(dead_letter=ok)
        replay_outcome_success(outreach_id=ok.outreach_id)
    failed = _send_failure()
    dead_letter_replay(dead_letter=failed)
    DeadLetter.objects.filter(pk=failed.pk).update(replay_succeeded=False)
    dead_letter_replay(dead_letter=_send_failure())
    # then the rate is 2 / 3
    assert replay_success_rate() == pytest.approx(2 / 3)


# --- the command ------------------------------------------------------------------------------


def test_command_with_all_replays_every_open_letter_and_says_so() -> None:
    letters = [_generation_failure(), _send_failure()]
    out = _command("--all")
    assert "replaying every open dead letter" in out
    assert "2 dead letter(s) replayed; 0 skipped." in out
    states = {o.state for o in Outreach.objects.filter(pk__in=[dl.outreach_id for dl in letters])}
    assert states == {State.QUEUED, State.APPROVED}


@pytest.mark.parametrize("args", [[], ["--reason", "exhausted"], ["--dry-run"]])
def test_command_without_a_scope_refuses_and_writes_nothing(args: list[str]) -> None:
    # given open dead letters
    letter = _generation_failure()
    events = OutreachEvent.objects.count()
    # when the command is run with no --all, --org or --id
    with pytest.raises(CommandError, match="--all, --org NAME or --id N"):
        _command(*args)
    # then nothing was replayed
    assert DeadLetter.objects.get(pk=letter.pk).status == DeadLetter.Status.OPEN
    assert OutreachEvent.objects.count() == events


@pytest.mark.slow
def test_command_without_a_scope_exits_non_zero() -> None:
    import os
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "manage.py", "replay_dead_letters"],
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "--all, --org NAME or --id N" in result.stderr


def test_command_with_org_replays_only_that_organizations_letters() -> None:
    # given dead letters in two organizations
    mine, theirs = _generation_failure(), _send_failure()
    org = mine.outreach.lead.organization
    # when replaying --org with its name
    out = _command("--org", org.name)
    # then only its letter moved
    assert f"Replayed #{mine.pk}" in out
    assert DeadLetter.objects.get(pk=mine.pk).status == DeadLetter.Status.REPLAYED
    assert DeadLetter.objects.get(pk=theirs.pk).status == DeadLetter.Status.OPEN


def _possibly_sent() -> DeadLetter:
    outreach = make_outreach(
        state=State.SENDING, draft_subject="Hi", draft_body="A note.", message_id=MESSAGE_ID, send_attempts=2
    )
    return dead_letter(
        outreach=outreach,
        from_=State.SENDING,
        failure_class=ErrorClass.POSSIBLY_SENT,
        reason="may have been sent 2 times",
        job_type="send",
    )


def test_command_with_all_leaves_possibly_sent_letters_to_a_person() -> None:
    # given a possibly-sent letter (a person must confirm the prospect did not get it)
    unconfirmed, other = _possibly_sent(), _send_failure()
    # when replaying --all
    out = _command("--all")
    # then it is skipped, saying how to replay it once confirmed; the other one is replayed
    assert "possibly sent: confirm the prospect did not get it" in out
    assert DeadLetter.objects.get(pk=unconfirmed.pk).status == DeadLetter.Status.OPEN
    assert DeadLetter.objects.get(pk=other.pk).status == DeadLetter.Status.REPLAYED
    # and naming it (by id, or by its class) replays it
    _command("--id", str(unconfirmed.pk))
    assert DeadLetter.objects.get(pk=unconfirmed.pk).status == DeadLetter.Status.REPLAYED
    again = _possibly_sent()
    _command("--all", "--reason", "possibly_sent")
    assert DeadLetter.objects.get(pk=again.pk).status == DeadLetter.Status.REPLAYED


def test_command_refuses_an_unknown_org_and_all_with_org() -> None:
    _generation_failure()
    with pytest.raises(CommandError, match="--org 'Nope': there is no organization"):
        _command("--org", "Nope")
    with pytest.raises(CommandError, match="not allowed with argument"):
        _command("--all", "--org", "Nope")


def test_command_with_reason_replays_only_that_class() -> None:
    # given an exhausted and a permanent failure
    exhausted = _generation_failure(failure_class=ErrorClass.EXHAUSTED)
    permanent = _generation_failure(failure_class=ErrorClass.PERMANENT)
    # when replaying --reason permanent
    out = _command("--all", "--reason", "permanent")
    # then only the permanent one moved
    assert f"Replayed #{permanent.pk}" in out
    assert DeadLetter.objects.get(pk=permanent.pk).status == DeadLetter.Status.REPLAYED
    assert DeadLetter.objects.get(pk=exhausted.pk).status == DeadLetter.Status.OPEN


def test_command_with_id_replays_only_that_letter() -> None:
    wanted, other = _send_failure(), _send_failure()
    out = _command("--id", str(wanted.pk))
    assert f"Replayed #{wanted.pk} (outreach {wanted.outreach_id}, send) -> approved" in out
    assert DeadLetter.objects.get(pk=other.pk).status == DeadLetter.Status.OPEN


def test_command_with_id_of_a_replayed_letter_reports_why_it_skipped() -> None:
    letter = _send_failure()
    _command("--id", str(letter.pk))
    out = _command("--id", str(letter.pk))
    assert "0 dead letter(s) replayed; 1 skipped." in out
    assert "it is replayed" in out


def test_command_with_id_and_other_reason_skips_and_says_why() -> None:
    letter = _generation_failure(failure_class=ErrorClass.EXHAUSTED)
    out = _command("--id", str(letter.pk), "--reason", "policy")
    assert "failure class is exhausted, not policy" in out
    assert DeadLetter.objects.get(pk=letter.pk).status == DeadLetter.Status.OPEN


def test_command_refuses_an_unknown_reason_listing_the_valid_ones() -> None:
    with pytest.raises(
        CommandError, match=r"'bogus' is not a failure class.*rate_limited, transient, permanent"
    ):
        _command("--reason", "bogus")


def test_command_refuses_an_unknown_id() -> None:
    with pytest.raises(CommandError, match="--id 999999: there is no dead letter"):
        _command("--id", "999999")


def test_command_rerun_replays_nothing_new() -> None:
    _generation_failure()
    _command("--all")
    events = OutreachEvent.objects.count()
    out = _command("--all")
    assert "Nothing to replay" in out
    assert OutreachEvent.objects.count() == events


def test_command_dry_run_changes_nothing() -> None:
    letter = _send_failure()
    out = _command("--all", "--dry-run")
    assert f"Would replay #{letter.pk}" in out
    assert "-> approved" in out
    assert "1 dead letter(s) would be replayed" in out
    assert DeadLetter.objects.get(pk=letter.pk).status == DeadLetter.Status.OPEN
    assert Outreach.objects.get(pk=letter.outreach_id).state == State.DEAD
