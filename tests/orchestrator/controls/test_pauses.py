"""Pauses (orchestrator.controls.pauses): paused work stays QUEUED (or APPROVED) and says why; nothing
paused is left DISPATCHED; resuming lets the next cycle take it."""

from __future__ import annotations

from datetime import date
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from nurture.mail.sending import outreach_send
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from orchestrator.controls import pauses
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.models import Pause
from outreach.models import Mailbox, Outreach, Owner, State, VerifiedDomain
from outreach.tiers import Tier
from tests.factories import make_draft, make_lead, make_org, make_outreach, make_owner, make_user

pytestmark = pytest.mark.django_db


def _cycle(budget: Budget, capture: Any) -> tuple[set[int], set[int]]:
    with capture(execute=True):
        report = dispatch_cycle(budget=budget)
    return set(report.generation), set(report.send)


def test_a_paused_owner_waits_queued_with_the_reason_and_goes_after_the_resume(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given two owners with queued work, one paused by an operator
    alice = make_user("alice")
    paused_owner, other = make_owner(name="Ann"), make_owner()
    waiting = make_outreach(lead=make_lead(owner=paused_owner))
    going = make_outreach(lead=make_lead(owner=other))
    stop, created = pauses.pause(owner=paused_owner, by=alice, reason="checking the copy")
    assert created
    # when a cycle runs
    generation, _ = _cycle(budget, django_capture_on_commit_callbacks)
    # then only the other owner's work went, and the paused one says who paused it and why
    assert generation == {going.pk}
    waiting.refresh_from_db()
    assert waiting.state == State.QUEUED
    assert waiting.blocked_reason.startswith("paused by alice at ")
    assert waiting.blocked_reason.endswith("(owner Ann): checking the copy")
    # when the pause is lifted, the next cycle takes it
    assert pauses.resume(pauses=[stop], by=alice) == 1
    generation, _ = _cycle(budget, django_capture_on_commit_callbacks)
    assert generation == {waiting.pk}


def test_an_organization_pause_stops_all_its_owners_and_no_other(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    org, other = make_org(), make_org()
    stopped = [make_outreach(lead=make_lead(owner=make_owner(organization=org))).pk for _ in range(2)]
    going = make_outreach(lead=make_lead(owner=make_owner(organization=other))).pk
    pauses.pause(organization=org, by=make_user())
    generation, _ = _cycle(budget, django_capture_on_commit_callbacks)
    assert generation == {going}
    assert set(Outreach.objects.filter(id__in=stopped).values_list("state", flat=True)) == {State.QUEUED}


def test_a_tier_pause_holds_that_tier_only_for_new_work_and_approved_drafts(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given an organization whose nudges are paused, with a queued intro, a queued nudge and an
    # approved draft of each
    org = make_org()
    owner = make_owner(organization=org)
    intro = make_outreach(lead=make_lead(owner=owner))
    nudge = make_outreach(lead=make_lead(owner=owner), kind=Outreach.Kind.NUDGE)
    approved_intro = make_draft(lead=make_lead(owner=owner), state=State.APPROVED)
    approved_nudge = make_draft(lead=make_lead(owner=owner), state=State.APPROVED, kind=Outreach.Kind.NUDGE)
    pauses.pause(organization=org, tier=Tier.NUDGE, by=make_user("bob"))
    # when a cycle runs
    generation, send = _cycle(budget, django_capture_on_commit_callbacks)
    # then the intros went and the nudges wait, the queued one saying why
    assert (generation, send) == ({intro.pk}, {approved_intro.pk})
    nudge.refresh_from_db()
    approved_nudge.refresh_from_db()
    assert (nudge.state, approved_nudge.state) == (State.QUEUED, State.APPROVED)
    assert "paused by bob" in nudge.blocked_reason
    assert "tier nudge" in nudge.blocked_reason


def test_a_sender_domain_pause_stops_the_organizations_sending_from_it(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    on_domain = make_org(sender_email="Sales <sales@Mail.Example.com>")
    elsewhere = make_org(sender_email="hi@other.example")
    stopped = make_outreach(lead=make_lead(owner=make_owner(organization=on_domain)))
    going = make_outreach(lead=make_lead(owner=make_owner(organization=elsewhere)))
    pauses.pause(
        sender_domain="mail.example.com", reason="hard-bounce rate 7% > 5%", source=Pause.Source.BOUNCES
    )
    generation, _ = _cycle(budget, django_capture_on_commit_callbacks)
    assert generation == {going.pk}
    stopped.refresh_from_db()
    assert stopped.blocked_reason.startswith("paused automatically at ")
    assert stopped.blocked_reason.endswith("(sender domain mail.example.com): hard-bounce rate 7% > 5%")


def test_pausing_the_same_scope_twice_is_one_pause() -> None:
    owner = make_owner()
    first, created = pauses.pause(owner=owner, by=make_user())
    again, created_again = pauses.pause(owner=owner, by=make_user())
    assert (created, created_again, again.pk) == (True, False, first.pk)
    assert first.organization_id == owner.organization_id  # tenancy checks see whose it is


def test_generation_dispatched_before_the_pause_goes_back_to_the_queue_refunded_and_uncharged(
    budget: Budget,
) -> None:
    # given a job dispatched (budget reserved) before its owner was paused
    owner = make_owner()
    reservation = budget.reserve(requests=3, tokens=1_800)
    assert isinstance(reservation, Reservation)
    outreach = make_outreach(
        lead=make_lead(owner=owner), state=State.DISPATCHED, reservation_id=reservation.id
    )
    pauses.pause(owner=owner, by=make_user("carol"))
    # when the worker picks it up
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.QUEUED
    # then it waits queued with the reason, no attempt charged, its reservation given back
    outreach.refresh_from_db()
    assert (outreach.state, outreach.attempts, outreach.reservation_id) == (State.QUEUED, 0, "")
    assert outreach.blocked_reason.startswith("paused by carol")
    assert budget.refund(reservation_id=reservation.id) is False  # already refunded
    assert outreach.events.filter(from_state=State.DISPATCHED, to_state=State.QUEUED, note="paused").exists()


def test_a_send_dispatched_before_the_pause_waits_approved_and_nothing_leaves(smtp_sink: Any) -> None:
    owner = make_owner()
    draft = make_draft(lead=make_lead(owner=owner), state=State.DISPATCHED)
    pauses.pause(owner=owner, by=make_user())
    assert outreach_send(outreach_id=draft.pk) == State.APPROVED
    draft.refresh_from_db()
    assert (draft.state, draft.send_attempts) == (State.APPROVED, 0)
    assert draft.blocked_reason.startswith("paused by ")
    assert smtp_sink.messages == []


def test_job_pause_finds_the_oldest_pause_that_covers_the_job_and_no_other() -> None:
    # given an outreach of owner Ann (organization A, sending from a.example), an intro
    org = make_org(sender_email="sales@A.example")
    ann, other = make_owner(organization=org, name="Ann"), make_owner(organization=org)
    job = Outreach.objects.select_related("lead__organization", "owner").get(
        pk=make_outreach(lead=make_lead(owner=ann), kind=Outreach.Kind.INTRO).pk
    )
    by = make_user()
    # when only pauses that miss it are active, none stops it
    pauses.pause(organization=make_org(), by=by)
    pauses.pause(owner=other, by=by)
    pauses.pause(organization=org, tier=Tier.REPLY, by=by)
    pauses.pause(sender_domain="b.example", by=by)
    assert pauses.job_pause(outreach=job) is None
    # then each kind of scope that covers it does, the oldest one naming the reason
    domain, _ = pauses.pause(sender_domain="a.example", by=by, reason="bounces")
    pauses.pause(owner=ann, by=by)
    assert pauses.job_pause(outreach=job) == domain
    pauses.resume(pauses=[domain], by=by)
    found = pauses.job_pause(outreach=job)
    assert found is not None
    assert found.owner_id == ann.pk
    assert found.blocked_reason().startswith("paused by ")
    pauses.resume(pauses=[found], by=by)
    tier, _ = pauses.pause(organization=org, tier=Tier(job.tier), by=by)
    assert pauses.job_pause(outreach=job) == tier


def test_the_cycles_view_gives_each_owner_the_oldest_pause_of_every_scope_that_covers_it() -> None:
    # given owners in three organizations, and pauses of every kind of scope, oldest first
    a, b, c = (make_org(sender_email=f"sales@{x}.example") for x in "abc")
    ann, bob, cat, dan = (
        make_owner(organization=a),
        make_owner(organization=a),
        make_owner(organization=b),
        make_owner(organization=c),
    )
    by = make_user()
    replies, _ = pauses.pause(tier=Tier.REPLY, by=by, reason="replies everywhere")
    domain, _ = pauses.pause(sender_domain="a.example", by=by, reason="bounces")
    pauses.pause(owner=ann, by=by, reason="ann, later")
    nudges, _ = pauses.pause(organization=b, tier=Tier.NUDGE, by=by, reason="b's nudges")
    org_b, _ = pauses.pause(organization=b, by=by, reason="all of b")
    pauses.pause(organization=make_org(), by=by, reason="someone else")
    # when the cycle asks what stops them
    found = pauses.blocking(owner_ids=[ann.pk, bob.pk, cat.pk, dan.pk])
    # then each owner is stopped by the oldest pause covering all its work, and each tier by its own
    assert found.owners == {
        ann.pk: domain.blocked_reason(),
        bob.pk: domain.blocked_reason(),
        cat.pk: org_b.blocked_reason(),
    }
    everywhere = {Tier.REPLY: replies.blocked_reason()}
    assert found.tiers == {
        ann.pk: everywhere,
        bob.pk: everywhere,
        cat.pk: {**everywhere, Tier.NUDGE: nudges.blocked_reason()},
        dan.pk: everywhere,
    }
    # and given the owners' organizations and sender domains, as the cycle has them, the same
    # verdicts from the one read of the pauses
    known = {o.pk: (o.organization_id, o.organization.sender_domain) for o in (ann, bob, cat, dan)}
    with CaptureQueriesContext(connection) as queries:
        again = pauses.blocking(owner_ids=[ann.pk, bob.pk, cat.pk, dan.pk], organizations=known)
    assert (again.owners, again.tiers) == (found.owners, found.tiers)
    assert len(queries) == 1


def test_owners_of_one_organization_share_its_verdict_but_not_one_owners_own_pause() -> None:
    # given one organization whose sender domain is paused, an owner of it with a pause of its
    # own (nudges), one sending from mailboxes of its own, and two others
    org = make_org(sender_email="sales@d.example")
    own, plain, boxed, other = (make_owner(organization=org) for _ in range(4))
    by = make_user()
    domain, _ = pauses.pause(sender_domain="d.example", by=by, reason="bounces")
    nudges, _ = pauses.pause(owner=own, tier=Tier.NUDGE, by=by, reason="own's nudges")
    # when the cycle asks what stops them (the owner with a pause of its own asked first)
    found = pauses.blocking(owner_ids=[own.pk, plain.pk, boxed.pk, other.pk], mailbox_owners={boxed.pk})
    # then the domain's pause stops each owner sending from it, the mailbox owner is judged by
    # its mailboxes instead, and only the owner with the nudge pause has it
    assert found.owners == {
        own.pk: domain.blocked_reason(),
        plain.pk: domain.blocked_reason(),
        other.pk: domain.blocked_reason(),
    }
    assert found.tiers == {own.pk: {Tier.NUDGE: nudges.blocked_reason()}}


def test_a_cycle_reads_the_pauses_once_and_loads_none_when_there_are_none(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    """The cycle's admission asks about pauses twice (what they stop; which sender domains a
    mailbox may not send from): one plain read serves both, and the pauses themselves, with
    who paused them, are loaded only when there are some."""
    # given an owner sending from a mailbox of its own, and one without, each with an intro
    boxed, plain = make_owner(), make_owner()
    VerifiedDomain.objects.create(organization=boxed.organization, domain="boxed.example")
    box = Mailbox.objects.create(
        organization=boxed.organization, address="ann@boxed.example", daily_cap=50, ramp_from=date(2026, 1, 1)
    )
    box.owners.add(boxed)
    intros = {make_outreach(lead=make_lead(owner=owner)).pk for owner in (boxed, plain)}
    # when a cycle runs with no pause active
    with CaptureQueriesContext(connection) as queries:
        generation, _ = _cycle(budget, django_capture_on_commit_callbacks)
    # then both intros go, and the pauses' table was read once
    assert generation == intros
    assert len([q for q in queries.captured_queries if "orchestrator_pause" in q["sql"]]) == 1
    # and when one is paused, the next cycle loads that pause for its reason, and holds the owner
    pauses.pause(owner=plain, by=make_user(), reason="checking")
    waiting = make_outreach(lead=make_lead(owner=plain))
    with CaptureQueriesContext(connection) as queries:
        _cycle(budget, django_capture_on_commit_callbacks)
    waiting.refresh_from_db()
    assert (waiting.state, waiting.blocked_reason.endswith("checking")) == (State.QUEUED, True)
    assert len([q for q in queries.captured_queries if "orchestrator_pause" in q["sql"]]) == 2


def test_a_cycle_loads_the_pauses_again_only_once_one_is_paused_or_lifted_or_a_name_in_a_reason_changes(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    """At a thousand organizations, each with a pause of its own, loading and indexing the
    pauses was 79 ms of a 505 ms cycle (bench/dispatch.py --organizations 1000, 2026-12-07):
    the dispatcher keeps them while their scopes (read every cycle) and the owners' version
    (their reasons name owners and organizations) stand."""
    # given Ann paused, her intro waiting, and a cycle that loaded the pause
    ann, bob = make_owner(name="Ann"), make_owner(name="Bob")
    stop, _ = pauses.pause(owner=ann, by=make_user("alice"), reason="checking")
    waiting = make_outreach(lead=make_lead(owner=ann))
    _cycle(budget, django_capture_on_commit_callbacks)
    # when the next cycle runs, nothing paused or lifted since
    going = make_outreach(lead=make_lead(owner=bob))
    with CaptureQueriesContext(connection) as queries:
        generation, _ = _cycle(budget, django_capture_on_commit_callbacks)
    # then it read the pauses' scopes alone, and still held Ann's intro for the same reason
    assert generation == {going.pk}
    assert len([q for q in queries.captured_queries if "orchestrator_pause" in q["sql"]]) == 1
    waiting.refresh_from_db()
    assert (waiting.state, waiting.blocked_reason.endswith("(owner Ann): checking")) == (State.QUEUED, True)
    # when Ann is renamed, the next cycle's reason names her as she is now
    Owner.objects.filter(pk=ann.pk).update(name="Anna")
    _cycle(budget, django_capture_on_commit_callbacks)
    waiting.refresh_from_db()
    assert waiting.blocked_reason.endswith("(owner Anna): checking")
    # when her pause is lifted and Bob is paused, the next cycle takes hers and holds his
    pauses.resume(pauses=[stop], by=None)
    pauses.pause(owner=bob, reason="his turn")
    held = make_outreach(lead=make_lead(owner=bob))
    generation, _ = _cycle(budget, django_capture_on_commit_callbacks)
    assert generation == {waiting.pk}
    held.refresh_from_db()
    assert (held.state, held.blocked_reason.endswith("(owner Bob): his turn")) == (State.QUEUED, True)


def test_the_active_pauses_are_the_querysets_with_who_and_what_loaded() -> None:
    # given pauses of an owner (by a person), of an organization's tier, and one lifted
    by = make_user("alice")
    owner = make_owner(name="Ann")
    mine, _ = pauses.pause(owner=owner, by=by, reason="checking")
    tier, _ = pauses.pause(organization=make_org(), tier=Tier.NUDGE, reason="no nudges")
    lifted, _ = pauses.pause(owner=make_owner(), reason="gone")
    pauses.resume(pauses=[lifted], by=by)
    # when the active ones are read (their SQL compiled once per process)
    found = pauses.active()
    # then they are the active ones oldest first, and naming who and what reads nothing more
    expected = Pause.objects.filter(resumed_at__isnull=True).order_by("created_at", "id")
    assert found == list(expected) == [mine, tier]
    with CaptureQueriesContext(connection) as queries:
        reasons = [p.blocked_reason() for p in found]
    assert len(queries) == 0
    assert reasons == [p.blocked_reason() for p in expected]
    assert "alice" in reasons[0]
    assert "Ann" in reasons[0]
