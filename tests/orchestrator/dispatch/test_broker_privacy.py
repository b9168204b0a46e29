"""Task messages carry ids only: no lead email address reaches Redis (the broker) or Flower."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis

from orchestrator.budget import Budget, Limits
from orchestrator.dispatch.cycle import dispatch_cycle
from outreach.models import Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db


def _redis_texts(client: Any) -> list[str]:
    """Every key and value in the database as text, kombu's base64 message bodies decoded too."""
    raw: list[bytes] = []
    for key in client.scan_iter():
        kind = client.type(key)
        raw.append(key)
        if kind == b"list":
            raw += client.lrange(key, 0, -1)
        elif kind == b"string":
            raw.append(client.get(key))
        elif kind == b"hash":
            raw += [part for pair in client.hgetall(key).items() for part in pair]
        elif kind == b"set":
            raw += client.smembers(key)
        elif kind == b"zset":
            raw += client.zrange(key, 0, -1)
    texts = [value.decode(errors="replace") for value in raw if value]
    return texts + [body for text in texts for body in _decoded_body(text)]


def _decoded_body(text: str) -> list[str]:
    try:
        message = json.loads(text)
    except ValueError:
        return []
    if isinstance(message, dict) and message.get("properties", {}).get("body_encoding") == "base64":
        return [base64.b64decode(message["body"]).decode(errors="replace")]
    return []


def test_no_task_message_in_redis_contains_a_lead_email(
    redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given queued work for leads with distinctive addresses, and approved drafts to send
    org = make_org()
    emails = [f"private.person{i}@secret-prospect.example" for i in range(4)]
    owners = [make_owner(organization=org) for _ in range(2)]
    for i, email in enumerate(emails):
        lead = make_lead(owner=owners[i % 2], email=email)
        make_outreach(
            lead=lead,
            state=State.QUEUED if i < 3 else State.APPROVED,
            draft_subject="Hi",
            draft_body=f"Dear {email}",
        )
    budget = Budget(redis_client=redis_client, limits=Limits(rpm=100_000, tpm=100_000_000, burst_ms=60_000))
    # when one dispatch cycle publishes its tasks
    with django_capture_on_commit_callbacks(execute=True):
        report = dispatch_cycle(budget=budget)
    # then the broker holds the messages (ids in them) and no address anywhere in Redis
    assert len(report.generation) == 3
    assert len(report.send) == 1
    texts = _redis_texts(redis_client)
    assert redis_client.llen("generation") == 3
    assert redis_client.llen("send") == 1
    bodies = "\n".join(texts)
    for outreach_id in report.generation + report.send:
        assert f"[{outreach_id}]" in bodies  # the scan really reads the decoded task arguments
    for email in emails:
        assert email not in bodies
    assert "secret-prospect" not in bodies
    assert Outreach.objects.filter(state=State.DISPATCHED).count() == 4
