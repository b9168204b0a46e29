"""What a Celery user would write without this product: one task per outreach making its three
LLM calls, Celery's `rate_limit`, and autoretry with backoff on 429 and 5xx.

Run by bench/compare.py as `celery -A bench.naive_app worker`; configured by environment
(NAIVE_BROKER, NAIVE_LLM_BASE_URL, NAIVE_RATE_LIMIT). Outcomes go to a Redis hash.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import openai
import redis
from celery import Celery
from celery.signals import task_retry

BROKER = os.environ.get("NAIVE_BROKER", "redis://127.0.0.1:6379/13")
app = Celery("naive", broker=BROKER)
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_serializer="json",
    accept_content=["json"],
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
)
_client: openai.OpenAI | None = None
_results = redis.Redis.from_url(BROKER)


def client() -> openai.OpenAI:
    global _client
    if _client is None:
        _client = openai.OpenAI(
            base_url=os.environ["NAIVE_LLM_BASE_URL"], api_key="sk-naive", max_retries=0, timeout=30
        )
    return _client


@app.task(
    bind=True,
    name="naive.outreach",
    rate_limit=os.environ.get("NAIVE_RATE_LIMIT", "100/m"),
    autoretry_for=(openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError),
    retry_backoff=2,
    retry_backoff_max=60,
    retry_jitter=True,
    max_retries=25,
)
def outreach(self: Any, job_id: str, owner: int, kind: str, enqueued_at: float) -> None:
    for step in ("plan", "context", "message"):
        client().chat.completions.create(
            model="sim-1",
            max_tokens=300,
            messages=[{"role": "user", "content": f"Write the {step} for outreach {job_id} ({kind})."}],
        )
    done = {
        "owner": owner,
        "kind": kind,
        "enqueued_at": enqueued_at,
        "done_at": time.time(),
        "retries": self.request.retries,
    }
    _results.hset("naive:done", job_id, json.dumps(done))


@task_retry.connect
def _count_retry(reason: Any = None, **_: object) -> None:
    # The product's definition (orchestrator.figures.retry_rate): a retry is a failed
    # attempt run again; a 429 is a wait for budget, counted by the provider, not a retry.
    # `reason` is Celery's Retry, whose `exc` is a pickle-safe stand-in (openai's errors come
    # back as plain OpenAIError); `excs` keeps the original's repr, class name first.
    if str(getattr(reason, "excs", "")).startswith(f"{openai.RateLimitError.__name__}("):
        _results.incr("naive:retries_429")
    else:
        _results.incr("naive:retries")
