"""Workers stopped as a platform stops them on a deploy: SIGTERM to the worker's main process,
then SIGKILL once the service's grace period (docker-compose.yml's `stop_grace_period`; Docker's
default, 10 s, where none is set) has passed. Every worker kind of the recipe (config.workers)
is stopped mid-job:

- generation and reply (threads pools, soft shutdown): mid LLM call (llm_sim answering each
  call in 4 s, so a job's calls outlast Docker's default). Each finishes its jobs before it
  exits, or, past its grace, hands them back after the call in progress;
- send (threads): while the mail server holds its email (answering after 12 s). It finishes;
- orchestrator (prefork, warm shutdown): mid dispatch cycle. A cycle takes well under a second
  on its own, so "mid-cycle" is held where a slow database would hold it: the cycle has
  reserved its picks' budget and waits on PostgreSQL (a SHARE lock on the outreach table, as a
  long transaction or a migration would take) to claim them;
- dead_letter (prefork, warm shutdown): mid alert check, its webhook POST held by the receiver
  (3 s an answer). Its other task, one dead letter's alert line, is a read and a log line with
  no "mid" to stop it in; it is stopped received-but-not-begun behind the check. The dead-letter
  record itself is never this worker's to lose: dead_letter() writes it with the move to DEAD,
  in the failing job's own transaction, and only queues the alert line.

Each test checks what the kind could lose: nothing is lost, nothing is paid for twice or sent
twice, no reservation is left behind, and the worker exits by itself within its grace. One more
lets the grace run out on a held dispatch cycle, to show what a SIGKILLed cycle leaves: its
picks in the queue, and its reservations outstanding until they expire (an open gap).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from config.queues import Queue
from config.workers import WORKERS
from devtools.llm_sim import LLMSim
from devtools.processes import ProcessGroup, celery_beat, celery_worker
from devtools.smtp_sink import SMTPSink
from devtools.webhook_sink import WebhookSink
from orchestrator.failures.dead_letters import dead_letter
from orchestrator.models import DeadLetter
from orchestrator.work import get_budget
from outreach.models import ErrorClass, Outreach, OutreachEvent, State
from tests.e2e.conftest import wait_until
from tests.factories import make_draft, make_lead, make_org, make_outreach, make_owner
from tests.faults.conftest import StackFactory
from tests.faults.helpers import (
    TimedLLMStub,
    all_in,
    claims,
    delivery,
    outreach_table_locked,
    sent_events,
    states,
    writes_waiting,
)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
DOCKER_DEFAULT_GRACE_S = 10.0
WRITING_CALLS = 3  # plan, context, message


@dataclass(frozen=True)
class Lane:
    """A writing worker kind: its queue, what it writes, and the LLM calls of one job."""

    queue: Queue
    kind: Outreach.Kind
    calls: int  # a reply's job classifies it first (triage), then writes

    def outreach(self, count: int) -> list[int]:
        """`count` outreach of this lane's kind, of an autonomous owner (written and sent
        without a person; a reply the classifier reads as interest is answered alone)."""
        agent = make_owner(organization=make_org(), daily_limit=100)
        context = {"inbound": INBOUND} if self.kind == Outreach.Kind.REPLY else {}
        return [
            make_outreach(lead=make_lead(owner=agent), kind=self.kind, context=context).pk
            for _ in range(count)
        ]


INBOUND = {"subject": "Re: hi", "body": "Yes, Tuesday works.", "message_id": "<t@x>"}
LANES = [
    pytest.param(Lane(Queue.GENERATION, Outreach.Kind.INTRO, calls=WRITING_CALLS), id="generation"),
    pytest.param(Lane(Queue.REPLY, Outreach.Kind.REPLY, calls=1 + WRITING_CALLS), id="reply"),
]


@pytest.fixture
def slow_sim() -> Iterator[LLMSim]:
    provider = LLMSim(rpm=600, tpm=1_000_000, latency_ms=4000, jitter_ms=0)
    provider.start()
    yield provider
    provider.stop()


def grace_s(queue: Queue) -> float:
    """The compose service's stop_grace_period ("90s", "1m30s"), or Docker's default."""
    service = yaml.safe_load(COMPOSE.read_text())["services"][WORKERS[queue].service]
    period = str(service.get("stop_grace_period", ""))
    if not period:
        return DOCKER_DEFAULT_GRACE_S
    parts = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", period)
    assert parts, f"unreadable stop_grace_period {period!r}"
    return 60.0 * int(parts[1] or 0) + int(parts[2] or 0)


def platform_stop(
    group: ProcessGroup, name: str, *, grace: float, meanwhile: Callable[[], object] = lambda: None
) -> bool:
    """SIGTERM to the main process, then `meanwhile` (what happens around it as it stops), and
    SIGKILL to what is left `grace` s after the SIGTERM; True if it exited by itself."""
    proc = group.procs.pop(name)
    os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    meanwhile()
    try:
        proc.wait(max(0.0, deadline - time.monotonic()))
        return True
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        return False


def slots(queue: Queue) -> int:
    """2 for the threads pools; the prefork kinds run their recipe's one process."""
    return min(2, WORKERS[queue].concurrency)


def start_workers(group: ProcessGroup, *queues: Queue) -> None:
    """Beat and the workers of `queues` only, named `worker-<queue>`."""
    for queue in queues:
        group.start(f"worker-{queue.value}", celery_worker(queue, concurrency=slots(queue)))
    group.start("beat", celery_beat())


def start_successor(group: ProcessGroup, queue: Queue) -> None:
    """The worker a deploy starts in place of the stopped one (another node name)."""
    argv = celery_worker(queue, concurrency=slots(queue), name=f"{queue.value}2")
    group.start(f"worker-{queue.value}-2", argv)


def log_count(group: ProcessGroup, pattern: str) -> int:
    """Matches of the regular expression `pattern` over every log of the group (old and new
    workers alike)."""
    return sum(
        len(re.findall(pattern, path.read_text(errors="replace"))) for path in group.log_dir.glob("*.log")
    )


# --- the writing workers: generation and reply --------------------------------------------------


@pytest.mark.parametrize("lane", LANES)
def test_a_writing_worker_stopped_mid_call_finishes_its_jobs_before_it_exits(
    make_stack: StackFactory, slow_sim: LLMSim, smtp_sink: SMTPSink, lane: Lane, figures: dict[str, object]
) -> None:
    # given two outreach being written, each job mid its first 4 s call
    ids = lane.outreach(2)
    stack = make_stack(llm_base_url=slow_sim.base_url, DISPATCH_STUCK_AFTER_S="600")
    start_workers(stack, Queue.ORCHESTRATOR, lane.queue, Queue.SEND)
    wait_until(
        lambda: states(ids)[State.GENERATING] == 2 and slow_sim.stats()["in_flight"] == 2,
        timeout_s=30,
        what="both jobs mid-call",
        group=stack,
    )
    # when the platform stops the worker, and starts its successor (a deploy)
    stopped_at = time.monotonic()
    exited = platform_stop(stack, f"worker-{lane.queue.value}", grace=grace_s(lane.queue))
    stop_s = time.monotonic() - stopped_at
    start_successor(stack, lane.queue)  # a reply's email leaves from its own lane
    # then it exited by itself, its jobs done (none handed back): each outreach sent once, each
    # job's calls made once
    assert exited, f"SIGKILLed after the {grace_s(lane.queue)} s grace"
    assert stop_s < 60, "waited out the whole WORKER_SHUTDOWN_GRACE_S though its jobs were done"
    assert not OutreachEvent.objects.filter(outreach_id__in=ids, note__contains="handed back").exists()
    wait_until(all_in(ids, State.SENT), timeout_s=30, what="both SENT", group=stack)
    assert slow_sim.stats()["requests"] == lane.calls * len(ids)
    assert set(sent_events(ids).values()) == {1}
    assert delivery(smtp_sink, ids).copies == 0
    assert not OutreachEvent.objects.filter(outreach_id__in=ids, error_class="stuck").exists()
    # and no reservation is left outstanding
    assert get_budget().snapshot()["in_flight"] == 0
    figures.update(outreach=len(ids), stop_s=round(stop_s, 1), llm_requests=slow_sim.stats()["requests"])


@pytest.mark.parametrize("lane", LANES)
def test_a_writing_job_outlasting_the_grace_hands_back_and_runs_again_once(
    make_stack: StackFactory, slow_sim: LLMSim, smtp_sink: SMTPSink, lane: Lane, figures: dict[str, object]
) -> None:
    # given one outreach mid its first 4 s call, on a worker whose grace is 1 s
    ids = lane.outreach(1)
    stack = make_stack(
        llm_base_url=slow_sim.base_url, DISPATCH_STUCK_AFTER_S="600", WORKER_SHUTDOWN_GRACE_S="1"
    )
    start_workers(stack, Queue.ORCHESTRATOR, lane.queue, Queue.SEND)
    wait_until(
        lambda: states(ids)[State.GENERATING] == 1 and slow_sim.stats()["in_flight"] == 1,
        timeout_s=30,
        what="the job mid-call",
        group=stack,
    )
    # when the platform stops the worker, then its successor starts
    exited = platform_stop(stack, f"worker-{lane.queue.value}", grace=grace_s(lane.queue))
    handed_back = OutreachEvent.objects.filter(
        outreach_id__in=ids, from_state=State.GENERATING, to_state=State.QUEUED, note__contains="handed back"
    )
    assert exited
    assert handed_back.count() == 1
    start_successor(stack, lane.queue)
    # then the job ran again from where it was handed back, with no attempt charged, and was
    # sent once: the call in progress, then the writing calls (an intro's call in progress was
    # its plan, thrown away with the job; a reply's was its triage, whose class is kept)
    wait_until(all_in(ids, State.SENT), timeout_s=40, what="SENT", group=stack)
    assert set(Outreach.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {0}
    assert slow_sim.stats()["requests"] == 1 + WRITING_CALLS
    assert set(sent_events(ids).values()) == {1}
    # and the reservations of both runs are settled, none left outstanding
    assert get_budget().snapshot()["in_flight"] == 0
    figures.update(outreach=1, handed_back=1, llm_requests=slow_sim.stats()["requests"])


# --- send ----------------------------------------------------------------------------------------


def test_a_send_worker_stopped_mid_send_finishes_its_email_before_it_exits(
    make_stack: StackFactory, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    # given an approved draft whose email the mail server holds 12 s before it answers
    ids = [make_draft(lead=make_lead(owner=make_owner(daily_limit=100)), state=State.APPROVED).pk]
    smtp_sink.data_delay_s = 12.0
    stack = make_stack(DISPATCH_STUCK_AFTER_S="600")
    start_workers(stack, Queue.ORCHESTRATOR, Queue.SEND)
    wait_until(
        lambda: len(smtp_sink.messages) == 1, timeout_s=30, what="the email at the server", group=stack
    )
    # when the platform stops the send worker
    stopped_at = time.monotonic()
    exited = platform_stop(stack, "worker-send", grace=grace_s(Queue.SEND))
    stop_s = time.monotonic() - stopped_at
    # then it exited by itself once the server answered, the email recorded SENT once: no
    # "possibly sent", no resend
    assert exited, f"SIGKILLed after the {grace_s(Queue.SEND)} s grace"
    assert states(ids)[State.SENT] == 1
    assert set(sent_events(ids).values()) == {1}
    seen = delivery(smtp_sink, ids)
    assert (seen.received, seen.copies) == (1, 0)
    figures.update(outreach=1, stop_s=round(stop_s, 1))


# --- orchestrator --------------------------------------------------------------------------------

HELD = 2  # the held cycle's picks: its in-flight cap (DISPATCH_MAX_IN_FLIGHT)
HOLD_S = 2.0  # how long PostgreSQL keeps the claim waiting after the SIGTERM


def _cycle_held_at_its_claim(make_stack: StackFactory, lock: ExitStack) -> tuple[list[int], ProcessGroup]:
    """Four outreach, and an orchestrator whose first cycle has reserved budget for two of them
    and waits on the outreach table (held by `lock`) to claim them."""
    ids = Lane(Queue.GENERATION, Outreach.Kind.INTRO, calls=WRITING_CALLS).outreach(2 * HELD)
    stack = make_stack(DISPATCH_STUCK_AFTER_S="600", DISPATCH_MAX_IN_FLIGHT=str(HELD))
    lock.enter_context(outreach_table_locked("SHARE"))
    start_workers(stack, Queue.ORCHESTRATOR, Queue.GENERATION, Queue.SEND)
    wait_until(
        lambda: writes_waiting() == 1 and get_budget().snapshot()["in_flight"] == HELD,
        timeout_s=30,
        what="a cycle with its picks reserved, waiting to claim them",
        group=stack,
    )
    assert states(ids)[State.QUEUED] == len(ids)
    return ids, stack


def test_an_orchestrator_stopped_mid_cycle_finishes_the_cycle_and_its_successor_takes_over(
    make_stack: StackFactory, stub: TimedLLMStub, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    with ExitStack() as lock:
        # given a dispatch cycle that has reserved the budget of two picks and waits on PostgreSQL
        # to claim them, two more outreach waiting behind its in-flight cap
        ids, stack = _cycle_held_at_its_claim(make_stack, lock)
        worker = stack.procs["worker-orchestrator"]
        alive_while_held: list[bool] = []

        def database_answers_later() -> None:
            time.sleep(HOLD_S)
            alive_while_held.append(worker.poll() is None)
            lock.close()

        # when the platform stops the orchestrator worker, and PostgreSQL answers 2 s later
        stopped_at = time.monotonic()
        exited = platform_stop(
            stack, "worker-orchestrator", grace=grace_s(Queue.ORCHESTRATOR), meanwhile=database_answers_later
        )
        stop_s = time.monotonic() - stopped_at
    # then the worker waited for its cycle (a warm shutdown), which claimed its two picks, and
    # exited by itself; no other cycle ran: the other two still wait
    assert alive_while_held == [True]
    assert exited, f"SIGKILLed after the {grace_s(Queue.ORCHESTRATOR)} s grace"
    assert list(claims(ids).values()) == [1] * HELD
    assert states(ids)[State.QUEUED] == len(ids) - HELD
    # and the claimed two had their tasks on the broker (with the 600 s stuck timeout nothing
    # else would move them), and its successor dispatched the rest: every outreach claimed
    # once, sent once
    start_successor(stack, Queue.ORCHESTRATOR)
    wait_until(all_in(ids, State.SENT), timeout_s=40, what="all SENT", group=stack)
    assert set(claims(ids).values()) == {1}
    assert set(sent_events(ids).values()) == {1}
    assert delivery(smtp_sink, ids).copies == 0
    assert not OutreachEvent.objects.filter(outreach_id__in=ids, error_class="stuck").exists()
    # and no reservation is left outstanding
    assert get_budget().snapshot()["in_flight"] == 0
    figures.update(outreach=len(ids), held_s=HOLD_S, stop_s=round(stop_s, 1), llm_requests=len(stub.requests))


def test_an_orchestrator_killed_mid_cycle_past_its_grace_leaves_its_picks_queued_for_its_successor(
    make_stack: StackFactory, stub: TimedLLMStub, smtp_sink: SMTPSink, figures: dict[str, object]
) -> None:
    with ExitStack() as lock:
        # given a dispatch cycle that has reserved the budget of two picks and waits on PostgreSQL
        # to claim them
        ids, stack = _cycle_held_at_its_claim(make_stack, lock)
        # when the platform's grace runs out before PostgreSQL answers (2 s here: a cycle wedged
        # past compose's 120 s), and PostgreSQL answers after the SIGKILL
        exited = platform_stop(stack, "worker-orchestrator", grace=2.0)
    killed_at = time.monotonic()
    # then its claim never committed: every pick is still QUEUED, none was claimed or published
    assert not exited
    assert states(ids)[State.QUEUED] == len(ids)
    assert not claims(ids)
    # and its successor, once the dead cycle's lease has expired, dispatches them all: each
    # outreach claimed once, sent once
    start_successor(stack, Queue.ORCHESTRATOR)
    wait_until(all_in(ids, State.SENT), timeout_s=60, what="all SENT", group=stack)
    taken_over_s = time.monotonic() - killed_at
    assert set(claims(ids).values()) == {1}
    assert set(sent_events(ids).values()) == {1}
    assert delivery(smtp_sink, ids).copies == 0
    # and the only reservations outstanding are the dead cycle's two: nobody refunds a
    # reservation made before a claim that never committed; it stops counting when it expires,
    # DISPATCH_STUCK_AFTER_S + 120 s after it was made (an open gap: docs/reliability.md,
    # "Findings")
    assert get_budget().snapshot()["in_flight"] == HELD
    figures.update(outreach=len(ids), all_sent_after_kill_s=round(taken_over_s, 1), reservations_left=HELD)


# --- dead letters --------------------------------------------------------------------------------


def _dead_lettered() -> int:
    """An outreach whose job failed for good: DEAD with its DeadLetter, written in one
    transaction by the product's one dead-letter path (which queues its alert line on commit)."""
    outreach = make_outreach(lead=make_lead(owner=make_owner()), state=State.GENERATING)
    dead_letter(
        outreach=outreach,
        from_=State.GENERATING,
        failure_class=ErrorClass.PERMANENT,
        reason="the provider answered 400",
        job_type="generate",
    )
    return outreach.pk


CHECK_DONE = r"Task orchestrator\.alerts_check\[[\w-]+\] succeeded"


def alert_line(outreach_id: int) -> str:
    """The dead_letter.alert task's one log line for an outreach's letter."""
    return rf"dead letter: outreach {outreach_id} \("


def test_a_dead_letter_worker_stopped_mid_alert_check_delivers_each_alert_once(
    make_stack: StackFactory, figures: dict[str, object]
) -> None:
    # given a dead letter, and the alert check (every second) posting what is due to a webhook
    # that answers each POST after 3 s
    hook = WebhookSink().start()
    hook.delay_s = 3.0
    try:
        first = _dead_lettered()
        stack = make_stack(
            DISPATCH_STUCK_AFTER_S="600",
            ALERT_WEBHOOK_URL=hook.url,
            ALERT_CHECK_INTERVAL_S="1",
            ALERT_DEAD_LETTERS_OPEN="0",
        )
        start_workers(stack, Queue.ORCHESTRATOR, Queue.DEAD_LETTER)
        wait_until(
            lambda: len(hook.received) == 1, timeout_s=30, what="the first alert at the webhook", group=stack
        )
        assert "dead letters are open" in hook.texts()[0]
        # and a second dead letter, its alert line queued while the check is mid-POST
        second = _dead_lettered()
        # when the platform stops the dead-letter worker, and starts its successor
        stopped_at = time.monotonic()
        exited = platform_stop(stack, "worker-dead_letter", grace=grace_s(Queue.DEAD_LETTER))
        stop_s = time.monotonic() - stopped_at
        delivered = len(hook.received)
        start_successor(stack, Queue.DEAD_LETTER)
        # then it exited by itself once its check had delivered every alert due, each once
        assert exited, f"SIGKILLed after the {grace_s(Queue.DEAD_LETTER)} s grace"
        by_condition = Counter(re.sub(r"\d+", "#", text) for text in hook.texts())
        assert set(by_condition.values()) == {1}, by_condition
        # and each dead letter was recorded once and its alert line logged once, the second by
        # whichever worker ran it (the stopping one gave it back unbegun, or ran it)
        wait_until(
            lambda: log_count(stack, alert_line(second)) >= 1,
            timeout_s=30,
            what="the second letter's alert line",
            group=stack,
        )
        assert DeadLetter.objects.filter(outreach_id__in=[first, second]).count() == 2
        assert [log_count(stack, alert_line(pk)) for pk in (first, second)] == [1, 1]
        # and the successor's checks deliver nothing again: the delivered alerts kept their claims
        checks = log_count(stack, CHECK_DONE)
        wait_until(
            lambda: log_count(stack, CHECK_DONE) >= checks + 3,
            timeout_s=30,
            what="three more alert checks",
            group=stack,
        )
        assert len(hook.received) == delivered
    finally:
        hook.stop()
    successor_log = (stack.log_dir / f"worker-{Queue.DEAD_LETTER.value}-2.log").read_text(errors="replace")
    figures.update(
        alerts=delivered,
        webhook_delay_s=hook.delay_s,
        stop_s=round(stop_s, 1),
        second_letter_alerted_by="successor"
        if re.search(alert_line(second), successor_log)
        else "stopping worker",
    )
