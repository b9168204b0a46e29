"""The cycle publishes each LLM job's task message as Celery's send_task would: the batch looks
up once what send_task looks up per message (cycle.enqueue), and the worker cannot tell."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
import redis

import nurture.tasks  # noqa: F401 (imported and registered, as in the dispatcher's worker)
from config.celery import app
from config.queues import Queue
from orchestrator.dispatch.cycle.enqueue import GENERATE_REPLY_TASK, GENERATE_TASK, tasks_enqueue_on_commit

pytestmark = pytest.mark.django_db

# A worker's app is finalized as it starts: its tasks registered, so send_task finds each one's
# time limits and puts them in the message.
app.finalize()

# What differs between any two messages: the task's id and the values made from it.
PER_MESSAGE = {"id", "root_id", "argsrepr", "correlation_id", "delivery_tag", "body"}


def _messages(client: redis.Redis, queue: str) -> list[dict[str, Any]]:
    """The queue's messages as kombu's Redis transport stores them (LPUSH: newest first)."""
    return [json.loads(raw) for raw in reversed(client.lrange(queue, 0, -1))]


def _shape(message: dict[str, Any]) -> dict[str, Any]:
    def keep(part: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in part.items() if k not in PER_MESSAGE}

    properties = keep(message["properties"])
    # send_task also leaves its argsrepr and kwargsrepr options in the properties; the worker
    # and Flower read them from the headers, and the batch writes them there only.
    properties.pop("kwargsrepr", None)
    properties["delivery_info"] = keep(properties["delivery_info"])
    return {
        "headers": keep(message["headers"]),
        "properties": properties,
        "content-type": message["content-type"],
    }


def _body(message: dict[str, Any]) -> list[Any]:
    return json.loads(base64.b64decode(message["body"]))


@pytest.mark.parametrize(
    ("task_name", "queue"), [(GENERATE_TASK, Queue.GENERATION), (GENERATE_REPLY_TASK, Queue.REPLY)]
)
def test_a_batch_publishes_the_messages_send_task_publishes(
    task_name: str, queue: str, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given the messages Celery's send_task publishes for two jobs
    for outreach_id in (11, 12):
        app.send_task(task_name, args=[outreach_id], argsrepr=f"[{outreach_id}]", kwargsrepr="{}")
    # when the cycle publishes two more on its claim's commit
    with django_capture_on_commit_callbacks(execute=True):
        tasks_enqueue_on_commit(task_name, [21, 22])
    # then all four wait in the task's queue, in order, and differ only in what a task's id makes
    sent, batched = _messages(redis_client, str(queue))[:2], _messages(redis_client, str(queue))[2:]
    assert [m["headers"]["argsrepr"] for m in sent + batched] == ["[11]", "[12]", "[21]", "[22]"]
    assert [_body(m)[0] for m in batched] == [[21], [22]]
    assert [_body(m)[1:] for m in batched] == [_body(m)[1:] for m in sent]
    assert [_shape(m) for m in batched] == [_shape(m) for m in sent]
    assert all(None not in m["headers"]["timelimit"] for m in batched)  # the task's own limits
    # each its own task, its own root (no task published them)
    ids = [m["headers"]["id"] for m in sent + batched]
    assert len(set(ids)) == 4
    assert all(m["headers"]["root_id"] == m["headers"]["id"] for m in batched)
    assert all(m["properties"]["correlation_id"] == m["headers"]["id"] for m in batched)


def test_published_from_a_task_each_message_names_it_as_its_parent_and_root(
    redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given a task that publishes one job by send_task and one by the cycle's batch
    @app.task(name="tests.publish_both", shared=False)
    def publish_both() -> None:
        app.send_task(GENERATE_TASK, args=[31], argsrepr="[31]", kwargsrepr="{}")
        with django_capture_on_commit_callbacks(execute=True):
            tasks_enqueue_on_commit(GENERATE_TASK, [32])

    # when it runs
    result = publish_both.apply()
    # then both name the running task as parent and root, as send_task does
    sent, batched = _messages(redis_client, str(Queue.GENERATION))
    assert batched["headers"]["parent_id"] == sent["headers"]["parent_id"] == result.id
    assert batched["headers"]["root_id"] == sent["headers"]["root_id"] == result.id
    assert _shape(batched) == _shape(sent)
