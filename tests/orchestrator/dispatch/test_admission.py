"""One admission decision before LLM work (issue 27): what the send path would refuse, and what an
owner has committed, keep rows QUEUED with a reason instead of spending the LLM on them. Through
the real dispatcher (`dispatch_cycle`) and the generation worker (`outreach_generate`, called
directly), on PostgreSQL, Redis and a scripted LLM over HTTP whose requests are counted."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from devtools.llm_stub import LLMStub
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, SendGrant, SendRules
from orchestrator.budget.mailboxes import MAILBOXES_PAUSED
from orchestrator.controls import pauses
from orchestrator.dispatch.cycle import CycleReport, dispatch_cycle
from orchestrator.dispatch.owner_tokens import owner_tokens_record
from orchestrator.models import Pause
from outreach.models import Lead, Mailbox, Outreach, Owner, State, VerifiedDomain
from outreach.tiers import Tier
from tests.factories import make_lead, make_mailbox, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db

DRAFTS = (State.AWAITING_APPROVAL, State.APPROVED)
COMMITTED = (State.DISPATCHED, State.GENERATING, State.SENDING, State.SENT, *DRAFTS)


def _queue(owner: Owner, count: int) -> list[int]:
    return [make_outreach(lead=make_lead(owner=owner)).pk for _ in range(count)]


def _cycle_and_work(budget: Budget, captured: Any) -> CycleReport:
    """One dispatch cycle, then the generation worker on every row it claimed (the send tasks
    the worker enqueues are left queued: those rows stay in flight, as on a busy day)."""
    with captured():
        report = dispatch_cycle(budget=budget)
    for outreach_id in report.generation:
        with captured():
            outreach_generate(outreach_id=outreach_id, budget=budget)
    return report


def _count(owner: Owner, states: tuple[State, ...]) -> int:
    return Outreach.objects.filter(owner=owner, state__in=states).count()


def test_a_review_required_owner_never_has_more_drafts_committed_than_its_day(
    budget: Budget, settings: Any, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given a seller whose drafts wait for review (20 a day) and an autonomous agent beside it,
    # each with 40 intros queued, and 8 LLM slots a cycle
    settings.DISPATCH_MAX_IN_FLIGHT = 8
    org = make_org()
    seller = make_owner(organization=org, daily_limit=20, review_required=True)
    agent = make_owner(organization=org, daily_limit=1000)
    _queue(seller, 40)
    _queue(agent, 40)
    # when cycles run, each followed by the generation workers, until nothing is left to start
    for _ in range(30):
        seller_room = min(20 - _count(seller, COMMITTED), _count(seller, (State.QUEUED,)))
        available = seller_room + _count(agent, (State.QUEUED,))
        report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
        # then the seller never has more than its day committed (drafts included) ...
        assert _count(seller, COMMITTED) <= 20
        # ... and every slot the seller cannot use goes to the agent in the same cycle
        assert len(report.generation) == min(report.slots, available)
        if not report.generation:
            break
    assert _count(seller, DRAFTS) == 20
    assert _count(agent, (State.QUEUED,)) == 0
    # and the seller's waiting rows say why
    waiting = Outreach.objects.filter(owner=seller, state=State.QUEUED).order_by("not_before", "id").first()
    assert waiting is not None
    assert "20 committed" in waiting.blocked_reason


def test_draft_ahead_lets_a_review_required_owner_draft_the_next_days_too(
    budget: Budget, settings: Any, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given a seller of 5 a day who reviews one day ahead
    settings.DISPATCH_MAX_IN_FLIGHT = 50
    seller = make_owner(daily_limit=5, review_required=True, draft_ahead_days=1)
    _queue(seller, 20)
    # when cycles run to completion
    for _ in range(5):
        if not _cycle_and_work(budget, django_capture_on_commit_callbacks).generation:
            break
    # then it holds today's and tomorrow's drafts, no more
    assert _count(seller, DRAFTS) == 10


def _sender_org(domain: str = "acme.example") -> Owner:
    return make_owner(organization=make_org(sender_email=f"sales@{domain}"), daily_limit=100)


def _assert_held(owner: Owner, report: CycleReport, llm_stub: LLMStub, words: str) -> None:
    assert report.generation == []
    assert llm_stub.requests == []
    rows = Outreach.objects.filter(owner=owner)
    assert {row.state for row in rows} == {State.QUEUED}
    assert all(words in row.blocked_reason for row in rows), [row.blocked_reason for row in rows]


@pytest.mark.parametrize(
    ("rules", "words"),
    [
        (SendRules(domain_daily=3), "sender domain acme.example: 3/day reached"),
        (SendRules(domain_daily=100, warmup=(3, 10)), "3/day reached (warm-up day 1)"),
    ],
)
def test_a_sender_domain_whose_day_is_used_up_starts_no_llm_work(
    rules: SendRules,
    words: str,
    budget: Budget,
    llm_stub: LLMStub,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given a sender domain that sent its day's (or warm-up step's) 3 messages already
    budget.send_rules = rules
    for _ in range(3):
        assert isinstance(budget.reserve_send(domain="acme.example"), SendGrant)
    owner = _sender_org()
    _queue(owner, 4)
    # when the dispatcher and the workers run
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then nothing is written: the rows wait, saying why, and no LLM request is made
    _assert_held(owner, report, llm_stub, words)


@pytest.mark.parametrize("sends_from", ["organization", "mailbox"])
def test_a_domains_day_counts_the_work_in_flight_of_owners_deactivated_since_it_started(
    sends_from: str, budget: Budget, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given a sender domain with 5 emails a day, two of them taken by the jobs in flight of an
    # owner deactivated since (they still run and send), sending from its organization's
    # domain or from a mailbox on it, and another owner with 4 rows queued
    budget.send_rules = SendRules(domain_daily=5)
    gone, owner = _sender_org(), _sender_org()
    if sends_from == "mailbox":
        gone.organization.sender_email = "sales@elsewhere.example"
        gone.organization.save()
        VerifiedDomain.objects.create(organization=gone.organization, domain="acme.example")
        make_mailbox(gone, "team@acme.example", cap=1_000)
    for state in (State.DISPATCHED, State.SENDING):
        make_outreach(lead=make_lead(owner=gone), state=state)
    Owner.objects.filter(pk=gone.pk).update(active=False)
    _queue(owner, 4)
    # when the dispatcher runs
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then only 3 are written: the domain's day counts the deactivated owner's 2 (until
    # 2026-12-07 it counted only active owners' work, and 4 were written, one of them to wait
    # for tomorrow's room)
    assert len(report.generation) == 3


def test_a_sender_domain_with_room_for_some_admits_only_those(
    budget: Budget, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given a domain with 3 left today, shared by two organizations' owners with 4 rows each
    budget.send_rules = SendRules(domain_daily=5)
    for _ in range(2):
        assert isinstance(budget.reserve_send(domain="acme.example"), SendGrant)
    a, b = _sender_org(), _sender_org()
    _queue(a, 4)
    _queue(b, 4)
    # when the dispatcher runs
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then 3 are written, and the rest wait saying why
    assert len(report.generation) == 3
    waiting = Outreach.objects.filter(owner__in=[a, b], state=State.QUEUED)
    assert waiting.count() == 5
    assert (
        "sender domain acme.example: 5/day reached" in waiting.order_by("not_before", "id")[0].blocked_reason
    )


def test_a_paused_sender_domain_starts_no_llm_work(
    budget: Budget, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given the organization's sender domain paused
    owner = _sender_org()
    pauses.pause(sender_domain="acme.example", reason="blocklisted")
    _queue(owner, 3)
    # when the dispatcher and the workers run
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then the rows wait, saying why, and no LLM request is made
    _assert_held(owner, report, llm_stub, "blocklisted")


def test_a_spend_cap_met_by_work_in_flight_starts_no_llm_work(
    budget: Budget, settings: Any, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given a price that makes one job's reserved tokens cost more than the organization's cap,
    # and one job of the organization in flight (nothing spent yet)
    settings.LLM_PRICES = {settings.LLM_MODEL: (Decimal("1"), Decimal("1"))}
    owner = make_owner(organization=make_org(daily_spend_cap=Decimal("0.50")), daily_limit=100)
    make_outreach(lead=make_lead(owner=owner), state=State.DISPATCHED)
    queued = _queue(owner, 3)
    # when the dispatcher and the workers run
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then the queued rows wait, saying why, and no LLM request is made
    assert report.generation == []
    assert llm_stub.requests == []
    rows = Outreach.objects.filter(id__in=queued)
    assert {row.state for row in rows} == {State.QUEUED}
    assert all("daily spend cap $0.50 reached" in row.blocked_reason for row in rows)


def test_a_spend_cap_counts_the_work_in_flight_of_an_owner_deactivated_since_it_started(
    budget: Budget, settings: Any, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given one job's reserved tokens priced above the organization's cap, and a job in flight
    # of an owner of the organization deactivated since (its job still runs and costs)
    settings.LLM_PRICES = {settings.LLM_MODEL: (Decimal("1"), Decimal("1"))}
    org = make_org(daily_spend_cap=Decimal("0.50"))
    gone, owner = (make_owner(organization=org, daily_limit=100) for _ in range(2))
    make_outreach(lead=make_lead(owner=gone), state=State.DISPATCHED)
    Owner.objects.filter(pk=gone.pk).update(active=False)
    queued = _queue(owner, 3)
    # when the dispatcher and the workers run
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then the cycle prices that job as it prices any (until 2026-12-06 it raised KeyError: the
    # learned costs were loaded for active owners only, and no cycle ran while the job was in
    # flight), and it has met the cap: nothing starts, each row says why
    assert report.generation == []
    assert llm_stub.requests == []
    rows = Outreach.objects.filter(id__in=queued)
    assert all(
        row.state == State.QUEUED and "daily spend cap $0.50 reached" in row.blocked_reason for row in rows
    )


def test_a_lead_suppressed_after_queueing_is_not_generated(
    budget: Budget, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given two queued intros of one owner, the older one's lead opted out since it was queued
    # (a status written without cancelling its work, e.g. by an import)
    owner = make_owner()
    first, second = _queue(owner, 2)
    Lead.objects.filter(outreach__id=first).update(status=Lead.Status.OPTED_OUT)
    # when the dispatcher and the workers run
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then the suppressed lead's row is never claimed (cancelled, saying why), the other is written
    assert first not in report.generation
    assert report.generation == [second]
    row = Outreach.objects.get(id=first)
    assert row.state == State.CANCELLED
    assert len(llm_stub.requests) >= 1


def test_an_owner_whose_mailboxes_have_no_room_left_today_starts_no_more_llm_work(
    budget: Budget, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given an owner who sends from one warmed-up mailbox of 3 a day, with 5 intros queued
    owner = _sender_org()
    make_mailbox(owner, "ann@acme.example", cap=3)
    _queue(owner, 5)
    # when the dispatcher and the workers run, twice
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    again = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then only what the mailbox can send today is written; the rest waits, saying why
    assert len(report.generation) == 3
    assert again.generation == []
    waiting = Outreach.objects.filter(owner=owner, state=State.QUEUED)
    assert waiting.count() == 2
    assert all("mailboxes' day reached" in row.blocked_reason for row in waiting)


def _mailbox_on(owner: Owner, address: str, *, cap: int = 50) -> Mailbox:
    """A warmed-up mailbox of `owner` on the address's domain (verified for its organization)."""
    VerifiedDomain.objects.get_or_create(organization=owner.organization, domain=address.rpartition("@")[2])
    return make_mailbox(owner, address, cap=cap)


def test_an_owner_sending_from_mailboxes_is_held_to_their_domains_day_not_its_organizations(
    budget: Budget, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given an organization whose default sender is on acme.example (plenty of room), and an
    # owner who sends from a mailbox on mail.acme.example, whose day (3) is used up
    budget.send_rules = SendRules(domain_daily=3)
    for _ in range(3):
        assert isinstance(budget.reserve_send(domain="mail.acme.example"), SendGrant)
    owner = _sender_org()
    _mailbox_on(owner, "ann@mail.acme.example")
    _queue(owner, 4)
    # when the dispatcher and the workers run
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then nothing is written: the mail could not leave today, and the rows say which domain
    _assert_held(owner, report, llm_stub, "sender domain mail.acme.example: 3/day reached")


def test_a_pause_of_the_organizations_sender_domain_leaves_owners_on_other_mailbox_domains_working(
    budget: Budget, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given the organization's default sender domain paused, and one of its owners sending from
    # a mailbox on another domain
    owner = _sender_org()
    _mailbox_on(owner, "ann@mail.acme.example")
    pauses.pause(sender_domain="acme.example", reason="blocklisted")
    queued = _queue(owner, 2)
    # when the dispatcher and the workers run
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then its work goes on: its mail does not leave from the paused domain
    assert sorted(report.generation) == sorted(queued)
    assert Outreach.objects.filter(id__in=queued, state=State.QUEUED).count() == 0


def test_a_spend_cap_counts_work_in_flight_at_its_learned_cost_not_the_configured_estimate(
    budget: Budget, settings: Any, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given $1 per 1,000 tokens, a configured estimate of 3 x 500 tokens a job ($1.50), and an
    # owner whose reply jobs are learned to count 6,000 tokens ($6) against a $5 cap
    settings.LLM_PRICES = {settings.LLM_MODEL: (Decimal("1"), Decimal("1"))}
    settings.LLM_CALLS_PER_OUTREACH, settings.LLM_EST_TOKENS_PER_CALL = 3, 500
    owner = make_owner(organization=make_org(daily_spend_cap=Decimal("5")), daily_limit=100)
    owner_tokens_record(owner_id=owner.pk, settled=4_000, counted=6_000, kind="reply")
    # and one of its replies in flight, three intros queued (intros: the owner's $6 average)
    make_outreach(lead=make_lead(owner=owner), kind=Outreach.Kind.REPLY, state=State.DISPATCHED)
    queued = _queue(owner, 3)
    # when the dispatcher and the workers run
    report = _cycle_and_work(budget, django_capture_on_commit_callbacks)
    # then the reply in flight ($6 reserved) has met the cap: nothing starts, each row says why
    # (at the configured $1.50 a job, all three would have started)
    assert report.generation == []
    assert llm_stub.requests == []
    rows = Outreach.objects.filter(id__in=queued)
    assert all("daily spend cap $5.00 reached" in row.blocked_reason for row in rows)


def test_a_closed_owner_gets_the_reason_of_the_first_rule_that_closes_it() -> None:
    # given an organization paused and over its spend cap, another over its spend cap sending
    # from acme.example, whose day is reached, and a third not closed itself
    from orchestrator.dispatch.cycle.admission import Closed
    from orchestrator.dispatch.reads import active_owners

    paused, spent, free = (
        make_org(sender_email=f"hi@{d}") for d in ("acme.example",) * 2 + ("free.example",)
    )
    a = make_owner(organization=paused)
    b = make_owner(organization=spent)  # no mailbox: sends from acme.example
    c = make_owner(organization=spent)
    make_mailbox(c, "c@other.example")  # sends from other.example only
    d = make_owner(organization=free)
    make_mailbox(d, "d@acme.example")  # every mailbox on acme.example
    e = make_owner(organization=free)  # not closed
    make_mailbox(e, "e1@acme.example")
    make_mailbox(e, "e2@other.example")  # one mailbox on an open domain
    make_owner(organization=free)  # sends from free.example: not closed
    f = make_owner(organization=spent)
    make_mailbox(f, "f@other.example")
    Mailbox.objects.filter(owners=f).update(active=False)  # as the deliverability guard does
    g = make_owner(organization=free)
    make_mailbox(g, "g@acme.example")
    make_mailbox(g, "g@paused.example")  # the usable one on a day reached: closed by the day
    h = make_owner(organization=paused)
    make_mailbox(h, "h@paused.example")  # every mailbox on a paused domain, its org paused too
    closed = Closed(
        paused={("organization", paused.pk): "paused", ("domain", ("paused.example", None)): "domain paused"},
        scopes=[(1, None, None, None, "paused.example")],  # the domain's pause, as admission read it
        spent={paused.pk: "spent", spent.pk: "spent"},
        domains={"acme.example": "domain"},
    )
    # when each closed owner's reason is asked
    reasons = closed.reasons(active_owners())
    # then each gets its first closing rule's (pause 1, no usable mailbox 4, domain 6, spend 7),
    # and an owner with a way out (a mailbox on an open domain, its own open sender domain) is
    # not closed
    assert reasons == {
        a.pk: "paused",
        b.pk: "domain",
        c.pk: "spent",
        d.pk: "domain",
        f.pk: MAILBOXES_PAUSED,
        g.pk: "domain",
        h.pk: "paused",
    }


def test_the_pauses_that_close_owners_whole_close_those_rule_1_stops_with_the_oldest_pauses_reason() -> None:
    # given two organizations sending from acme.example and one from other.example, an owner of
    # the first sending from a mailbox of its own, and pauses, oldest first: acme.example for
    # the second organization, acme.example for all, the first organization as a whole, and
    # the third's nudges (a tier: not all of its work)
    from orchestrator.dispatch.cycle.admission import Closed
    from orchestrator.dispatch.reads import active_owners

    first, second = (make_org(sender_email=f"hi{n}@acme.example") for n in (1, 2))
    third = make_org(sender_email="hi@other.example")
    a1, a2 = make_owner(organization=first), make_owner(organization=first)
    make_mailbox(a2, "a2@mail.example")
    b1 = make_owner(organization=second)
    make_owner(organization=third)  # its nudges paused only: not closed
    pauses.pause(organization=second, sender_domain="acme.example", reason="second on acme")
    pauses.pause(sender_domain="acme.example", reason="acme blocklisted")
    pauses.pause(organization=first, reason="contract renewal")
    pauses.pause(organization=third, tier=Tier.NUDGE, reason="no nudges")
    every = active_owners()
    # when admission's pause rule judges every owner, and the pauses that stop owners whole
    # name their owners without judging them
    judged = pauses.blocking(owner_ids=list(every.owners), mailbox_owners={a2.pk})
    closed = Closed(paused=judged.whole).reasons(every)
    # then both name the same owners, each with its oldest pause's reason: the domain's for
    # the owners sending from it, the organization's for the one on its own mailbox
    why = {p.reason: p.blocked_reason() for p in Pause.objects.all()}
    assert (
        closed
        == judged.owners
        == {
            a1.pk: why["acme blocklisted"],
            a2.pk: why["contract renewal"],
            b1.pk: why["second on acme"],
        }
    )
