"""DeadLetter moved from the outreach app to the orchestrator app (orchestrator 0003, outreach
0005) without touching the data: the table, its rows, its index and the permissions users were
granted on it all survive migrating forward, and the move can be migrated back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.apps.registry import Apps
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from orchestrator.models import DeadLetter
from outreach.models import ErrorClass
from tests.historical import historical_outreach

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("outreach", "0004_owner_daily_sends"), ("orchestrator", "0002_queue_health_permission")]
AFTER = [
    ("outreach", "0005_deadletter_moved_to_orchestrator"),
    ("orchestrator", "0003_deadletter_moved_here"),
]


def _migrate(targets: list[tuple[str, str]]) -> Apps:
    """Migrate to `targets`; the historical models as they are there."""
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    executor.loader.build_graph()  # the applied set changed
    # Every other app (contenttypes, auth) stays at its latest migration.
    moved = {app for app, _ in targets}
    others = [node for node in executor.loader.graph.leaf_nodes() if node[0] not in moved]
    return executor.loader.project_state([*targets, *others]).apps


@pytest.fixture
def before_the_move() -> Iterator[Apps]:
    """The database as it was before the move; always migrated forward to the latest again."""
    try:
        yield _migrate(BEFORE)
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        ContentType.objects.clear_cache()


def _old_dead_letter(apps: Apps) -> Any:
    outreach = historical_outreach(apps)
    return apps.get_model("outreach", "DeadLetter").objects.create(
        outreach_id=outreach.pk,
        job_type="send",
        failure_class=ErrorClass.EXHAUSTED,
        reason="HTTP 503 x3",
        suggested_action="Replay once it is healthy.",
        lead_id_ref=outreach.lead_id,
        owner_id_ref=outreach.owner_id,
        organization_id_ref=outreach.lead.organization_id,
    )


def _operator_allowed_to_change_dead_letters(apps: Apps) -> tuple[Any, Any]:
    """A user granted outreach.change_deadletter, as an operator was before the move."""
    content_type, _ = apps.get_model("contenttypes", "ContentType").objects.get_or_create(
        app_label="outreach", model="deadletter"
    )
    permission, _ = apps.get_model("auth", "Permission").objects.get_or_create(
        content_type=content_type, codename="change_deadletter", defaults={"name": "Can change dead letter"}
    )
    user = apps.get_model("auth", "User").objects.create(username="operator", is_staff=True)
    user.user_permissions.add(permission)
    return user, content_type


def _table_and_index() -> tuple[bool, bool]:
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
        constraints = connection.introspection.get_constraints(cursor, "outreach_deadletter")
    return "outreach_deadletter" in tables and "orchestrator_deadletter" not in tables, (
        "outreach_de_status_eee025_idx" in constraints
    )


def test_rows_and_granted_permissions_survive_the_move(before_the_move: Apps) -> None:
    # given, before the move, a dead letter and an operator granted outreach.change_deadletter
    old = _old_dead_letter(before_the_move)
    operator, old_content_type = _operator_allowed_to_change_dead_letters(before_the_move)

    # when the database is migrated forward
    _migrate(AFTER)
    ContentType.objects.clear_cache()

    # then the row is the orchestrator's DeadLetter, in the same table with the same index
    letter = DeadLetter.objects.get(pk=old.pk)
    assert (letter.outreach_id, letter.reason, letter.status) == (old.outreach_id, "HTTP 503 x3", "open")
    assert _table_and_index() == (True, True)
    # and the content type moved (same row), so the operator's permission is now orchestrator's
    moved = ContentType.objects.get_for_model(DeadLetter)
    assert (moved.pk, moved.app_label) == (old_content_type.pk, "orchestrator")
    assert not ContentType.objects.filter(app_label="outreach", model="deadletter").exists()
    user = User.objects.get(pk=operator.pk)
    assert user.has_perm("orchestrator.change_deadletter")
    assert not user.has_perm("outreach.change_deadletter")


def test_the_move_migrates_back_with_its_content_type(before_the_move: Apps) -> None:
    # given the moved state, with a dead letter and the orchestrator's content type
    after = _migrate(AFTER)
    ContentType.objects.clear_cache()
    content_type = ContentType.objects.get_for_model(DeadLetter)
    letter = DeadLetter.objects.create(
        outreach_id=historical_outreach(after).pk,
        job_type="generation",
        failure_class=ErrorClass.PERMANENT,
        reason="HTTP 400",
        suggested_action="Fix the request.",
        lead_id_ref=1,
        owner_id_ref=1,
        organization_id_ref=1,
    )
    # when migrated back to before the move
    apps = _migrate(BEFORE)
    # then the outreach app's DeadLetter reads the same row, under the same content type row
    assert apps.get_model("outreach", "DeadLetter").objects.get(pk=letter.pk).reason == "HTTP 400"
    old = apps.get_model("contenttypes", "ContentType").objects.get(app_label="outreach", model="deadletter")
    assert old.pk == content_type.pk
    assert _table_and_index() == (True, True)
