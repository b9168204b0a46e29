"""A dispatch cycle's cost does not grow with the owners or the queue: the same statements at 10^3
and 10^6 queued rows, and at 5,000 active owners none more than at 10 (fewer by the candidates'
reads the window's probes make needless), with every control on (pauses of
an owner, a tier and a sender domain, a daily spend cap, an organization's LLM cap, two
deployments, mailboxes). Statements are compared by shape (literals and id lists folded)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from config.deployments import Deployment
from devtools.bulk import SPREAD, rows_clone
from orchestrator.budget import Budget, Limits
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.models import Pause
from outreach.models import (
    Lead,
    Mailbox,
    Organization,
    Outreach,
    OutreachEvent,
    Owner,
    OwnerDailySends,
    State,
    VerifiedDomain,
)
from outreach.tiers import Tier
from tests.factories import make_owners

pytestmark = [pytest.mark.django_db, pytest.mark.slow]

SLOTS = 20


@pytest.fixture
def every_control(settings: Any) -> None:
    settings.LLM_DEPLOYMENTS = (
        Deployment(name="small", model="m-small", rpm=60_000, tpm=60_000_000),
        Deployment(name="large", model="m-large", rpm=60_000, tpm=60_000_000),
    )
    settings.LLM_STEP_MODELS = {"plan": "small", "context": "small", "message": "large"}
    settings.LLM_FALLBACKS = {}
    settings.LLM_PRICES = {
        "m-small": (Decimal("0.00015"), Decimal("0.0006")),
        "m-large": (Decimal("0.0025"), Decimal("0.01")),
    }
    settings.DISPATCH_MAX_IN_FLIGHT = SLOTS
    settings.LLM_RPM, settings.LLM_TPM = 100_000, 100_000_000  # the organization's cap below binds nothing


@pytest.fixture
def rolled_back_unchecked() -> Iterator[None]:
    """The test's transaction marked for rollback before Django's teardown, which then skips
    firing the foreign-key checks PostgreSQL deferred to commit (TestCase's constraint check):
    the worlds' million rows, copied in SQL from rows the ORM made, queue millions of them, and
    firing them took 91 s of CI (2026-12-06) for a transaction rolled back either way."""
    yield
    transaction.set_rollback(True)


def _world(*, owners: int, rows_per_owner: int) -> None:
    """Four organizations: one with a daily spend cap, one with its own LLM cap and its nudges
    paused, one sending from a mailbox (all its owners on it), one whose sender domain is paused;
    `owners` owners spread over them (one of them paused), one lead each, and `rows_per_owner`
    queued rows each (replies, intros and nudges)."""
    orgs = [
        Organization.objects.create(
            name="capped spend", sender_email="a@spend.example", daily_spend_cap=Decimal("50")
        ),
        Organization.objects.create(
            name="capped llm", sender_email="b@llm.example", llm_rpm=60_000, llm_tpm=60_000_000
        ),
        Organization.objects.create(name="mailboxes", sender_email="c@boxes.example"),
        Organization.objects.create(name="paused domain", sender_email="d@paused.example"),
    ]
    made = make_owners(owners, daily_limit=1000, each=lambda n: {"organization": orgs[n % 4]})
    VerifiedDomain.objects.create(organization=orgs[2], domain="boxes.example")
    box = Mailbox.objects.create(
        organization=orgs[2],
        address="box@boxes.example",
        daily_cap=10_000,
        ramp_from=date(2020, 1, 1),
        min_spacing_s=0,
        max_spacing_s=0,
    )
    box.owners.add(*[o for o in made if o.organization_id == orgs[2].pk])
    Pause.objects.create(sender_domain="paused.example", reason="domain paused")
    Pause.objects.create(owner=made[0], reason="owner paused")
    Pause.objects.create(organization=orgs[1], tier=int(Tier.NUDGE), reason="nudges paused")
    Lead.objects.bulk_create(
        Lead(
            organization_id=o.organization_id, owner=o, email=f"lead{o.pk}@prospect.example", first_name="Pat"
        )
        for o in made
    )
    lead = Lead.objects.order_by("id").first()
    assert lead is not None
    due = timezone.now() - timedelta(hours=1)
    template = Outreach.objects.create(
        lead=lead,
        owner_id=lead.owner_id,
        kind=Outreach.Kind.INTRO,
        tier=Tier.INTRO,
        state=State.QUEUED,
        not_before=due,
        state_changed_at=due,
        idempotency_key="template",
    )
    kinds = "(ARRAY['reply', 'intro', 'nudge'])[1 + g %% 3]"
    rows_clone(
        model=Outreach,
        template_id=template.pk,
        rows_sql=SPREAD,
        overrides={
            "lead_id": "l.id",
            "owner_id": "l.owner_id",
            "kind": kinds,
            "tier": "1 + g %% 3",
            "step": "CASE WHEN g %% 3 = 2 THEN 1 ELSE 0 END",
            "idempotency_key": "'q:' || g",
            "not_before": "now() - interval '1 hour' + g * interval '1 ms'",
        },
        params=[owners * rows_per_owner],
    )
    template.delete()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE outreach_outreach")


def _cycle_statements(redis_client: redis.Redis, captured: Any) -> Counter[str]:
    """A dispatcher's second cycle in this world, on a fresh budget, which fills every slot: its
    statements by shape. The first cycle's rows are put back first (a bench's reset, not a
    transition). The second, because the dispatcher keeps what it learned of the world from one
    cycle to the next (which tiers few owners have ready work in: cycle.window); a world that
    just changed costs its first cycle a statement or two more."""
    with captured(execute=False):
        claimed = dispatch_cycle(budget=_fresh_budget(redis_client)).generation
    Outreach.objects.filter(id__in=claimed).update(state=State.QUEUED, reservation_id="", llm_route="")
    budget = _fresh_budget(redis_client)
    with CaptureQueriesContext(connection) as queries, captured(execute=False):
        report = dispatch_cycle(budget=budget)
    assert 0 < len(report.generation) == report.slots  # a cycle that works: every slot filled
    return Counter(_shape(q["sql"]) for q in queries.captured_queries)


def _fresh_budget(redis_client: redis.Redis) -> Budget:
    redis_client.flushdb()
    return Budget(redis_client=redis_client, limits=Limits(rpm=100_000, tpm=100_000_000, burst_ms=60_000))


def _shape(sql: str) -> str:
    sql = re.sub(r"'[^']*'", "?", sql)
    # psycopg names an int array's type by its values' size (int2 below 32,768): the ids' size
    # is not the statement's shape.
    sql = re.sub(r"::int[248]\[\]", "::int[]", sql)
    sql = re.sub(r"\b\d+(\.\d+)?\b", "N", sql)
    sql = re.sub(r"N(, N)+", "N", sql)
    return re.sub(r"SAVEPOINT \"\w+\"", "SAVEPOINT", sql)


def _empty() -> None:
    """The next world starts from nothing (inside the test's transaction: rolled back after).
    Plain DELETEs, children first: TRUNCATE is refused with deferred constraints pending."""
    models = (OutreachEvent, Outreach, Lead, Mailbox.owners.through, Mailbox, VerifiedDomain, Pause)
    with connection.cursor() as cursor:
        for model in (*models, OwnerDailySends, Owner, Organization):
            cursor.execute(f"DELETE FROM {model._meta.db_table}")


def test_a_cycle_runs_no_more_statements_at_5000_owners_or_1000000_rows_than_at_10_and_1000(
    rolled_back_unchecked: None,
    every_control: None,
    redis_client: redis.Redis,
    django_capture_on_commit_callbacks: Any,
) -> None:
    # given 10 owners with 10^3 queued rows between them, every control on
    _world(owners=10, rows_per_owner=100)
    # when a cycle runs
    small = _cycle_statements(redis_client, django_capture_on_commit_callbacks)
    # then at 10^6 queued rows it runs exactly the same statements
    _empty()
    _world(owners=10, rows_per_owner=100_000)
    many_rows = _cycle_statements(redis_client, django_capture_on_commit_callbacks)
    assert many_rows == small, _diff(small, many_rows)
    # and at 5,000 owners none that it did not run, none more often; fewer only by a tier's
    # candidates' read, which the window's probes made needless (they read each probed owner's
    # first rows: reads.FIRST_ROWS) where a few owners' tiers are read whole instead
    _empty()
    _world(owners=5000, rows_per_owner=2)
    many_owners = _cycle_statements(redis_client, django_capture_on_commit_callbacks)
    assert not many_owners - small, _diff(small, many_owners)
    assert all(_candidates_read(shape) for shape in small - many_owners), _diff(small, many_owners)


def _candidates_read(shape: str) -> bool:
    """A tier's candidates' read (reads.ready_candidates), by its shape."""
    return (
        shape.lstrip().startswith("SELECT a.id, a.owner_id FROM") and "ORDER BY q.not_before, q.id" in shape
    )


def _diff(expected: Counter[str], got: Counter[str]) -> str:
    lines = [f"-{n} {s[:300]}" for s, n in (expected - got).items()]
    lines += [f"+{n} {s[:300]}" for s, n in (got - expected).items()]
    return "\n".join(lines)


def test_a_cycle_reads_the_owners_committed_work_and_its_llm_jobs_in_flight_in_one_statement(
    every_control: None, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given 10 owners with work queued, every control on
    _world(owners=10, rows_per_owner=100)
    from orchestrator.dispatch.reads import committed_work_load, llm_in_flight

    with CaptureQueriesContext(connection) as reads:
        committed_work_load()
        llm_in_flight()
    committed, in_flight = (_shape(q["sql"]) for q in reads.captured_queries)
    # when a cycle runs
    statements = _cycle_statements(redis_client, django_capture_on_commit_callbacks)
    # then it reads what the owners committed once (the window and admission share it), and
    # counts the LLM jobs in flight in that read (the window's bound and the slots), not in a
    # statement of their own (until 2026-12-07 it did)
    assert (statements[committed], statements[in_flight]) == (1, 0), statements
