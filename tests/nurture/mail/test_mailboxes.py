"""Sending from mailboxes: round robin, each mailbox's day and warm-up, spacing, the recipient's
business hours and the recipient domain's day; through the send worker's function with a real
SMTP sink, Redis and PostgreSQL, on a fixed clock (the budget's)."""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from email.utils import parseaddr
from typing import Any

import pytest
import redis
import time_machine
from django.db import connection

from devtools.smtp_sink import SMTPSink
from nurture.mail import sending
from nurture.mail.sending import outreach_send
from orchestrator.budget import Budget, Limits
from orchestrator.controls.mailboxes import business_hours_next, mailbox_room_today
from orchestrator.controls.pauses import pause
from outreach.models import Mailbox, Organization, Outreach, Owner, State, VerifiedDomain
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.subprocesses import send_one

pytestmark = pytest.mark.django_db

# A Wednesday, noon UTC.
NOON = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, at: datetime) -> None:
        self.ms = int(at.timestamp() * 1000)

    def __call__(self) -> int:
        return self.ms

    def advance(self, seconds: float) -> None:
        self.ms += int(seconds * 1000)


@pytest.fixture
def clock() -> Clock:
    return Clock(NOON)


@pytest.fixture
def fixed(redis_client: redis.Redis, clock: Clock) -> Budget:
    """A budget on the fixed clock (mailbox days, warm-up and spacing read it)."""
    return Budget(redis_client=redis_client, limits=Limits(rpm=100_000, tpm=100_000_000), clock=clock)


def _org(**fields: Any) -> Organization:
    org = make_org(sender_email="team@corp.example", **fields)
    for domain in ("corp.example", "mail.corp.example"):
        VerifiedDomain.objects.create(organization=org, domain=domain)
    return org


def _mailbox(owner: Owner, address: str, **fields: Any) -> Mailbox:
    terms: dict[str, Any] = {
        "daily_cap": 40,
        "ramp_from": date(2026, 1, 1),  # warmed up
        "min_spacing_s": 0,
        "max_spacing_s": 0,
        **fields,
    }
    box = Mailbox.objects.create(organization=owner.organization, address=address, **terms)
    box.owners.add(owner)
    return box


def _ready(owner: Owner, **lead_fields: Any) -> Outreach:
    return make_outreach(
        lead=make_lead(owner=owner, **lead_fields),
        state=State.DISPATCHED,
        draft_subject="Hello",
        draft_body="A short body for the test.",
    )


def _from(sink: SMTPSink) -> list[str]:
    return [parseaddr(m.mail_from)[1] or m.mail_from for m in sink.messages]


def test_an_owner_s_sends_go_round_its_mailboxes_and_record_which(fixed: Budget, smtp_sink: SMTPSink) -> None:
    # given an owner with three mailboxes
    owner = make_owner(organization=_org())
    boxes = [_mailbox(owner, f"{name}@corp.example") for name in ("ann", "bob", "cid")]
    rows = [_ready(owner) for _ in range(6)]
    # when six drafts are sent
    assert [outreach_send(outreach_id=r.pk, budget=fixed) for r in rows] == [State.SENT] * 6
    # then each mailbox sent two, in turn, from its own address, and each row names its mailbox
    smtp_sink.wait_for(6)
    used = [int(Outreach.objects.get(pk=r.pk).mailbox_id or 0) for r in rows]
    assert sorted(used) == sorted([b.pk for b in boxes] * 2)
    assert used[:3] == used[3:]
    assert len(set(used[:3])) == 3
    by_id = {b.pk: b.address for b in boxes}
    assert _from(smtp_sink) == [by_id[i] for i in used]


def test_an_owner_without_a_mailbox_sends_from_the_organization_s_sender(
    fixed: Budget, smtp_sink: SMTPSink
) -> None:
    row = _ready(make_owner(organization=_org()))
    assert outreach_send(outreach_id=row.pk, budget=fixed) == State.SENT
    smtp_sink.wait_for(1)
    assert _from(smtp_sink) == ["team@corp.example"]
    assert Outreach.objects.get(pk=row.pk).mailbox_id is None


@pytest.mark.parametrize(("ramp_from", "cap_today"), [(date(2026, 12, 2), 5), (date(2026, 11, 23), 23)])
def test_a_mailbox_sends_its_warm_up_step_of_the_day_then_waits(
    fixed: Budget, smtp_sink: SMTPSink, ramp_from: date, cap_today: int
) -> None:
    # given a mailbox capped at 40 a day, warming up from 5 on day 1 by 2 a day (day 1: 5; day 10: 23)
    owner = make_owner(organization=_org())
    _mailbox(owner, "new@corp.example", ramp_from=ramp_from, ramp_start=5, ramp_step=2)
    assert mailbox_room_today(owner_ids=[owner.pk], budget=fixed) == {owner.pk: {"corp.example": cap_today}}
    rows = [_ready(owner) for _ in range(cap_today + 1)]
    # when one more than the day's step is sent
    states = [outreach_send(outreach_id=r.pk, budget=fixed) for r in rows]
    # then the step went out, the last waits for the next UTC day, saying why
    assert states == [State.SENT] * cap_today + [State.APPROVED]
    last = Outreach.objects.get(pk=rows[-1].pk)
    assert (
        last.blocked_reason == f"mailboxes' day reached (new@corp.example {cap_today}/day), resumes 00:00 UTC"
    )
    assert (last.send_attempts, last.mailbox_id) == (0, None)
    assert mailbox_room_today(owner_ids=[owner.pk], budget=fixed) == {owner.pk: {"corp.example": 0}}


def test_a_send_inside_the_mailbox_spacing_waits_approved_until_it_has_passed(
    fixed: Budget, clock: Clock, smtp_sink: SMTPSink
) -> None:
    # given a mailbox spacing its sends 60-120 s apart, which just sent
    owner = make_owner(organization=_org())
    _mailbox(owner, "slow@corp.example", min_spacing_s=60, max_spacing_s=120)
    first, second = _ready(owner), _ready(owner)
    assert outreach_send(outreach_id=first.pk, budget=fixed) == State.SENT
    # when the next comes 59 s later
    clock.advance(59)
    # then it waits APPROVED, saying why, without a try counted
    assert outreach_send(outreach_id=second.pk, budget=fixed) == State.APPROVED
    second.refresh_from_db()
    assert second.blocked_reason.startswith("mailbox spacing: next send in ")
    assert 1 <= int(second.blocked_reason.split(" in ")[1].rstrip("s")) <= 61
    assert second.send_attempts == 0
    # and once the longest spacing has passed it goes
    clock.advance(62)
    Outreach.objects.filter(pk=second.pk).update(state=State.DISPATCHED)
    assert outreach_send(outreach_id=second.pk, budget=fixed) == State.SENT


def _slow_send_budget(monkeypatch: pytest.MonkeyPatch, *, then: Callable[[], None] = lambda: None) -> None:
    """The send budget answers after 20 ms of this process's time (a slow Redis), `then` run
    meanwhile."""
    acquire = sending.send_budget_acquire

    def slow_acquire(**kwargs: Any) -> Any:
        time.sleep(0.02)
        then()
        return acquire(**kwargs)

    monkeypatch.setattr(sending, "send_budget_acquire", slow_acquire)


def test_the_wait_for_the_send_budget_moves_the_mailbox_s_next_send_by_the_budget_s_clock(
    fixed: Budget, clock: Clock, smtp_sink: SMTPSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a mailbox spacing its sends 10 s apart, and a send budget that answers in 20 ms of
    # this process's time while 1.5 s pass on the budget's clock
    owner = make_owner(organization=_org())
    _mailbox(owner, "paced@corp.example", min_spacing_s=10, max_spacing_s=10)
    _slow_send_budget(monkeypatch, then=lambda: clock.advance(1.5))
    first, second = _ready(owner), _ready(owner)
    # when one is sent, and the next asks at once
    assert outreach_send(outreach_id=first.pk, budget=fixed) == State.SENT
    assert outreach_send(outreach_id=second.pk, budget=fixed) == State.APPROVED
    # then the mailbox's next send moved by the 1.5 s its clock saw pass during the wait (10 s
    # after the email left, not after its grant), not by the process's 20 ms
    second.refresh_from_db()
    assert second.blocked_reason == "mailbox spacing: next send in 10s"


def test_a_mailbox_without_spacing_is_not_held_by_a_slow_send_budget(
    fixed: Budget, smtp_sink: SMTPSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given a mailbox without spacing, and a send budget answering in 20 ms of this process's
    # time while the budget's clock stands still
    owner = make_owner(organization=_org())
    _mailbox(owner, "fast@corp.example")
    _slow_send_budget(monkeypatch)
    rows = [_ready(owner) for _ in range(3)]
    # when three are sent one after the other
    states = [outreach_send(outreach_id=r.pk, budget=fixed) for r in rows]
    # then all leave (until 2026-12-07 the wait was measured on this process's clock: each
    # of 1 ms or more moved the mailbox's next send past the budget's still clock, and the
    # warm-up test above failed when the machine was slow)
    assert states == [State.SENT] * 3


def test_a_send_outside_the_recipient_s_business_hours_waits_until_they_open(
    budget: Budget, smtp_sink: SMTPSink
) -> None:
    # given an organization sending 9-17 in the lead's time zone, and a lead in New York
    owner = make_owner(organization=_org(business_hours_start=9, business_hours_end=17))
    row = _ready(owner, timezone="America/New_York")
    # when it is sent at 06:30 New York time on a Wednesday (11:30 UTC)
    with time_machine.travel(datetime(2026, 12, 2, 11, 30, tzinfo=UTC), tick=False):
        assert outreach_send(outreach_id=row.pk, budget=budget) == State.APPROVED
    # then it waits until 09:00 there (14:00 UTC), saying why
    row.refresh_from_db()
    assert row.blocked_reason == (
        "recipient's business hours 9-17 America/New_York: waits until 2026-12-02 14:00 UTC"
    )
    assert row.not_before == datetime(2026, 12, 2, 14, 0, tzinfo=UTC)
    assert smtp_sink.messages == []
    # and at 09:30 there it goes
    Outreach.objects.filter(pk=row.pk).update(state=State.DISPATCHED)
    with time_machine.travel(datetime(2026, 12, 2, 14, 30, tzinfo=UTC), tick=False):
        assert outreach_send(outreach_id=row.pk, budget=budget) == State.SENT


@pytest.mark.parametrize(
    ("now", "opens"),
    [
        (datetime(2026, 12, 2, 12, 0, tzinfo=UTC), None),  # Wednesday 12:00
        (datetime(2026, 12, 2, 17, 0, tzinfo=UTC), datetime(2026, 12, 3, 9, 0, tzinfo=UTC)),  # closing time
        (datetime(2026, 12, 4, 18, 0, tzinfo=UTC), datetime(2026, 12, 7, 9, 0, tzinfo=UTC)),  # Friday evening
        (datetime(2026, 12, 5, 10, 0, tzinfo=UTC), datetime(2026, 12, 7, 9, 0, tzinfo=UTC)),  # Saturday
    ],
)
def test_business_hours_open_on_working_days(now: datetime, opens: datetime | None) -> None:
    assert business_hours_next(now=now, zone="UTC", start=9, end=17) == opens


def test_a_recipient_domain_gets_at_most_its_day_from_one_organization(
    fixed: Budget, smtp_sink: SMTPSink
) -> None:
    # given an organization capping each recipient domain at 2 a day, and three leads at acme
    owner = make_owner(organization=_org(recipient_domain_daily_cap=2))
    _mailbox(owner, "ann@corp.example")
    acme = [_ready(owner, email=f"p{i}@Acme.example") for i in range(3)]
    elsewhere = _ready(owner, email="x@other.example")
    # when all are sent
    states = [outreach_send(outreach_id=r.pk, budget=fixed) for r in [*acme, elsewhere]]
    # then two reached acme, the third waits saying why, and another domain is not held
    assert states == [State.SENT, State.SENT, State.APPROVED, State.SENT]
    assert Outreach.objects.get(pk=acme[2].pk).blocked_reason == (
        "recipient domain acme.example: 2/day reached, resumes 00:00 UTC"
    )
    # and another organization has its own count
    theirs = make_owner(organization=make_org(recipient_domain_daily_cap=2))
    assert outreach_send(outreach_id=_ready(theirs, email="p9@acme.example").pk, budget=fixed) == State.SENT


def test_a_paused_mailbox_is_skipped_and_room_counts_active_mailboxes(
    fixed: Budget, smtp_sink: SMTPSink
) -> None:
    owner = make_owner(organization=_org())
    _mailbox(owner, "on@corp.example", daily_cap=30)
    _mailbox(owner, "off@corp.example", daily_cap=30, active=False)
    alone = make_owner(organization=owner.organization)
    assert mailbox_room_today(owner_ids=[owner.pk, alone.pk], budget=fixed) == {
        owner.pk: {"corp.example": 30},
        alone.pk: None,
    }
    for _ in range(3):
        assert outreach_send(outreach_id=_ready(owner).pk, budget=fixed) == State.SENT
    smtp_sink.wait_for(3)
    assert set(_from(smtp_sink)) == {"on@corp.example"}
    assert mailbox_room_today(owner_ids=[owner.pk], budget=fixed) == {owner.pk: {"corp.example": 27}}
    Mailbox.objects.filter(address="on@corp.example").update(active=False)
    assert mailbox_room_today(owner_ids=[owner.pk], budget=fixed) == {owner.pk: {}}
    row = _ready(owner)
    assert outreach_send(outreach_id=row.pk, budget=fixed) == State.APPROVED
    assert Outreach.objects.get(pk=row.pk).blocked_reason == "every mailbox of this owner is paused"


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_two_send_workers_and_one_unit_left_send_one_email(
    redis_client: redis.Redis, smtp_sink: SMTPSink
) -> None:
    # given a mailbox with one send left today and two drafts handed to two send workers
    owner = make_owner(organization=_org())
    _mailbox(owner, "last@corp.example", daily_cap=1)
    rows = [_ready(owner), _ready(owner)]
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    smtp = ("127.0.0.1", smtp_sink.port)
    workers = [
        ctx.Process(target=send_one, args=(connection.settings_dict["NAME"], row.pk, smtp, barrier, results))
        for row in rows
    ]
    # when both send at once
    for worker in workers:
        worker.start()
    states = sorted(results.get(timeout=60) for _ in workers)
    for worker in workers:
        worker.join(timeout=30)
    # then one email left and the other waits for tomorrow
    assert states == sorted([State.SENT.value, State.APPROVED.value])
    smtp_sink.wait_for(1)
    assert len(smtp_sink.messages) == 1
    waiting = Outreach.objects.get(state=State.APPROVED)
    assert waiting.blocked_reason.startswith("mailboxes' day reached")


def test_a_mailbox_on_a_paused_sender_domain_is_left_out(fixed: Budget, smtp_sink: SMTPSink) -> None:
    # given an owner with a mailbox on each of two domains, one domain paused for the organization
    owner = make_owner(organization=_org())
    _mailbox(owner, "a@corp.example")
    _mailbox(owner, "b@mail.corp.example")
    pause(organization=owner.organization, sender_domain="mail.corp.example", reason="test")
    # when it sends three emails
    for _ in range(3):
        assert outreach_send(outreach_id=_ready(owner).pk, budget=fixed) == State.SENT
    # then all left from the other domain's mailbox
    smtp_sink.wait_for(3)
    assert set(_from(smtp_sink)) == {"a@corp.example"}
