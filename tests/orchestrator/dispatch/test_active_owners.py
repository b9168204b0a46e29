"""The dispatcher keeps the active owners and their mailboxes in memory and reads them again only
when a statement wrote owners, organizations, mailboxes or mailboxes' owners since
(reads.active_owners, OwnersVersion's triggers): whatever wrote them, the next cycle sees it;
nothing else makes it read every owner again."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from config.env import database_url
from orchestrator.budget import Budget, Limits, organization_scope
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.dispatch.reads import active_owners
from outreach.models import Mailbox, Organization, Outreach, Owner, OwnersVersion, State
from tests.factories import make_lead, make_mailbox, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db


def _owner_reads(run: Any) -> tuple[Any, int]:
    """What `run()` returned, and how many statements it ran that read the owners' table."""
    with CaptureQueriesContext(connection) as queries:
        result = run()
    return result, sum('FROM "outreach_owner"' in q["sql"] for q in queries.captured_queries)


def test_the_owners_are_read_once_and_then_only_their_version() -> None:
    # given two active owners, read once
    org = make_org(sender_email="team@first.example")
    first, second = make_owner(organization=org), make_owner(organization=org)
    active_owners()
    # when they are asked for again, nothing having changed
    with CaptureQueriesContext(connection) as queries:
        again = active_owners()
    # then one statement read the version, none the owners, and they are all there
    assert [q["sql"] for q in queries.captured_queries] == [
        "SELECT token::text FROM outreach_ownersversion WHERE id = 1"
    ]
    assert sorted(again.weights) == [first.pk, second.pk]
    assert [o.sender_domain for o in again.of([second.pk, first.pk])] == ["first.example", "first.example"]


@pytest.mark.parametrize(
    "write",
    [
        pytest.param(lambda owner: Owner.objects.filter(pk=owner.pk).update(weight=3), id="queryset update"),
        pytest.param(lambda owner: _save(owner, weight=3), id="save"),
        pytest.param(
            lambda owner: connection.cursor().execute(
                "UPDATE outreach_owner SET weight = 3 WHERE id = %s", [owner.pk]
            ),
            id="raw SQL",
        ),
    ],
)
def test_an_owner_written_any_way_is_read_again(write: Any) -> None:
    # given an owner of weight 1, read
    owner = make_owner(weight=1)
    assert active_owners().weights[owner.pk] == 1
    # when its weight is written, by the ORM or by hand
    write(owner)
    # then the next read reads the owners again and has it
    owners, reads = _owner_reads(active_owners)
    assert (owners.weights[owner.pk], reads) == (3, 1)


def test_an_organizations_spend_cap_is_kept_with_its_owners_and_read_again_when_written() -> None:
    # given an organization with a daily spend cap of $5 and one without, an owner each, read
    capped, free = make_org(daily_spend_cap=Decimal("5")), make_org()
    make_owner(organization=capped)
    make_owner(organization=free)
    assert active_owners().spend_caps == {capped.pk: Decimal("5")}
    # when the cap is raised, the other organization given one, and then the first's removed
    Organization.objects.filter(pk=capped.pk).update(daily_spend_cap=Decimal("7.50"))
    raised = active_owners().spend_caps
    Organization.objects.filter(pk=free.pk).update(daily_spend_cap=Decimal(0))
    both = active_owners().spend_caps
    Organization.objects.filter(pk=capped.pk).update(daily_spend_cap=None)
    # then each read after a write has the caps as written (the dispatcher asks no other)
    assert raised == {capped.pk: Decimal("7.50")}
    assert both == {capped.pk: Decimal("7.50"), free.pk: Decimal(0)}
    assert active_owners().spend_caps == {free.pk: Decimal(0)}


def _save(owner: Owner, **fields: Any) -> None:
    for name, value in fields.items():
        setattr(owner, name, value)
    owner.save()


def test_owners_added_deactivated_and_deleted_and_an_organization_s_address_changed_are_seen() -> None:
    # given an owner, read
    org = make_org(sender_email="team@old.example")
    kept, leaving, deleted = (make_owner(organization=org) for _ in range(3))
    assert set(active_owners().weights) == {kept.pk, leaving.pk, deleted.pk}
    # when one is deactivated, one deleted and one added
    Owner.objects.filter(pk=leaving.pk).update(active=False)
    Owner.objects.filter(pk=deleted.pk).delete()
    added = make_owner(organization=org)
    # then the next read has exactly the active ones
    assert set(active_owners().weights) == {kept.pk, added.pk}
    # and when their organization sends from another address, its domain is theirs next time
    Organization.objects.filter(pk=org.pk).update(sender_email="team@new.example")
    assert active_owners().of([kept.pk])[0].sender_domain == "new.example"


def _mailboxes(owner: Owner) -> list[tuple[str, int, bool]]:
    return [(b.address, b.daily_cap, b.active) for b in active_owners().mailboxes.get(owner.pk, ())]


def test_the_owners_mailboxes_are_kept_with_them_and_read_again_whatever_wrote_them() -> None:
    # given an owner on one mailbox and an owner on none, read
    org = make_org(sender_email="team@acme.example")
    ann, bob = make_owner(organization=org), make_owner(organization=org)
    box = make_mailbox(ann, "ann@acme.example", cap=3)
    assert (_mailboxes(ann), _mailboxes(bob)) == ([("ann@acme.example", 3, True)], [])
    # when they are asked for again, nothing having changed, then only the version is read
    with CaptureQueriesContext(connection) as queries:
        active_owners()
    assert len(queries.captured_queries) == 1
    # and when the mailbox's cap changes, a second owner is added to it, a mailbox is added,
    # the deliverability guard pauses one (a queryset update) and one is deleted, the next
    # read has each change
    Mailbox.objects.filter(pk=box.pk).update(daily_cap=7)
    assert _mailboxes(ann) == [("ann@acme.example", 7, True)]
    box.owners.add(bob)
    assert _mailboxes(bob) == [("ann@acme.example", 7, True)]
    other = make_mailbox(bob, "bob@acme.example", cap=3)
    assert _mailboxes(bob) == [("ann@acme.example", 7, True), ("bob@acme.example", 3, True)]
    Mailbox.objects.filter(pk=other.pk).update(active=False, paused_reason="bounces")
    assert _mailboxes(bob)[1] == ("bob@acme.example", 3, False)
    box.owners.remove(ann)
    Mailbox.objects.filter(pk=other.pk).delete()
    assert (_mailboxes(ann), _mailboxes(bob)) == ([], [("ann@acme.example", 7, True)])
    # and raw SQL on the links is seen too
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM outreach_mailbox_owners")
    assert _mailboxes(bob) == []


def test_a_cycle_holds_an_owner_to_a_mailbox_given_it_since_the_last_cycle(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given an owner with five intros queued and no mailbox, after a cycle that dispatched none
    # of them (no slots: a cap of 0 in flight)
    owner = make_owner(organization=make_org(sender_email="team@acme.example"))
    for _ in range(5):
        make_outreach(lead=make_lead(owner=owner))
    with override_settings(DISPATCH_MAX_IN_FLIGHT=0), django_capture_on_commit_callbacks(execute=False):
        assert dispatch_cycle(budget=budget).generation == []
    # when it is given a mailbox of 2 a day
    make_mailbox(owner, "ann@acme.example", cap=2)
    # then the next cycle starts only what that mailbox can send today
    with django_capture_on_commit_callbacks(execute=False):
        assert len(dispatch_cycle(budget=budget).generation) == 2


def test_a_write_rolled_back_is_not_kept() -> None:
    # given an owner of weight 1, read
    owner = make_owner(weight=1)
    active_owners()
    # when its weight is changed and read inside a transaction that is then rolled back
    seen: list[int] = []

    def written_then_rolled_back() -> None:
        with transaction.atomic():
            Owner.objects.filter(pk=owner.pk).update(weight=5)
            seen.append(active_owners().weights[owner.pk])
            raise RuntimeError("rolled back")

    with pytest.raises(RuntimeError):
        written_then_rolled_back()
    assert seen == [5]
    # then the next read has the weight that stands
    assert active_owners().weights[owner.pk] == 1


def test_without_a_version_the_owners_are_read_every_time() -> None:
    # given owners and no version (the table emptied: no write since)
    owner = make_owner()
    OwnersVersion.objects.all().delete()
    # when they are read twice, then both reads read the owners
    first, reads_first = _owner_reads(active_owners)
    second, reads_second = _owner_reads(active_owners)
    assert (reads_first, reads_second) == (1, 1)
    assert owner.pk in first.weights
    assert owner.pk in second.weights
    # and the next write to the owners gives them a version again
    make_owner()
    assert OwnersVersion.objects.get(pk=1).token is not None


def test_a_cycle_stops_dispatching_an_owner_deactivated_since_the_last_cycle(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given an owner with two intros queued, one dispatched by a cycle
    owner = make_owner()
    rows = [make_outreach(lead=make_lead(owner=owner)) for _ in range(2)]
    with django_capture_on_commit_callbacks(execute=False):
        assert len(dispatch_cycle(budget=budget).generation) == 2
    Outreach.objects.filter(pk=rows[1].pk).update(state=State.QUEUED, reservation_id="", llm_route="")
    # when the owner is deactivated
    Owner.objects.filter(pk=owner.pk).update(active=False)
    # then the next cycle dispatches nothing of it
    with django_capture_on_commit_callbacks(execute=False):
        report = dispatch_cycle(budget=budget)
    assert (report.active, report.generation) == (0, [])


@pytest.mark.django_db(transaction=True)
def test_two_transactions_writing_the_same_owner_queue_rather_than_deadlock() -> None:
    # given two owners, and two connections as two admins' or commands' transactions
    first, second = make_owner(weight=1), make_owner(weight=1)
    dsn = database_url(connection.settings_dict, name=connection.settings_dict["NAME"])
    failures: list[BaseException] = []
    with psycopg.connect(dsn) as one, psycopg.connect(dsn) as other:
        # when one writes the first owner and keeps its transaction open
        one.execute("UPDATE outreach_owner SET weight = 2 WHERE id = %s", [first.pk])

        def other_writes_the_second() -> None:
            try:
                other.execute("UPDATE outreach_owner SET weight = 3 WHERE id = %s", [second.pk])
                other.commit()
            except psycopg.Error as exc:
                failures.append(exc)

        waiting = threading.Thread(target=other_writes_the_second)
        waiting.start()
        _until_waiting_on_a_lock(other.info.backend_pid)
        # and then writes the second owner too, and commits
        try:
            one.execute("UPDATE outreach_owner SET weight = 4 WHERE id = %s", [second.pk])
            one.commit()
        except psycopg.Error as exc:
            failures.append(exc)
        waiting.join(10)
    # then neither was aborted as a deadlock (with the version renewed after each statement,
    # the other held the second owner's row while it waited for the version row, which the
    # one held while it waited for that row): the other waited for the one to commit
    assert failures == []
    assert dict(Owner.objects.values_list("id", "weight")) == {first.pk: 2, second.pk: 3}


def _until_waiting_on_a_lock(pid: int) -> None:
    """Until the backend `pid` waits for a lock (at most 10 s)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
            if cursor.fetchone() == ("Lock",):
                return
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} never waited for a lock")


def test_the_capped_owners_follow_the_caps_asked_about_not_the_last_answer() -> None:
    # given owners of a capped and of an uncapped organization
    capped, free = make_org(), make_org()
    a, b, c = make_owner(organization=capped), make_owner(organization=capped), make_owner(organization=free)
    every = active_owners()
    scope, other = organization_scope(capped.pk), organization_scope(free.pk)
    cap = {scope: Limits(rpm=10, tpm=10_000)}
    # then the owners of the capped one share its scope, asked once or again
    for _ in range(2):
        groups = every.capped(cap)
        assert groups.scopes == {a.pk: scope, b.pk: scope}
        assert {s: members.ordered for s, members in groups.members.items()} == {scope: (a.pk, b.pk)}
    # and when the caps change (the other organization capped too, then neither) the answer does
    both = every.capped({**cap, other: Limits(rpm=10, tpm=10_000)})
    assert (both.scopes[c.pk], both.members[other].ordered) == (other, (c.pk,))
    assert (every.capped({}).scopes, every.capped({}).members) == ({}, {})
