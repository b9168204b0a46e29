"""Alerts: a webhook told when something needs an operator, at most once per condition per
ALERT_INTERVAL_SECONDS, whichever process raises it.

`alert_raise(condition=..., text=...)` is the one way to send an alert (config faults and
auto-pauses may raise their own). The queue's own conditions are checked in orchestrator/metrics/alerts.py.

Once per interval across processes and hosts: `SET alert:<condition> <token> NX EX interval`
in Redis claims the interval before the POST. A delivery that fails gives the claim back
(deleted only if still ours), so the next check tries again: a failure is logged and never
consumes the interval, nor fails the task. With Redis unreachable there is no claim to make:
the alert is sent anyway (a repeated alert beats a lost one) and the fault is logged.
"""

from __future__ import annotations

import json
import logging
import secrets
import urllib.error
import urllib.request

import redis
from django.conf import settings

from config import redis_client

log = logging.getLogger(__name__)

KEY_PREFIX = "alert:"
DELIVERY_TIMEOUT_S = 5.0
# Give the claim back only if it is still ours (it may have expired and been claimed anew).
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def alert_raise(*, condition: str, text: str) -> bool:
    """Tell operators, at most once per ALERT_INTERVAL_SECONDS for this condition (a short slug,
    e.g. "dead-letters-open"): a WARNING log line, and the webhook when one is set. True when
    the webhook took it; never raises."""
    key, token = KEY_PREFIX + condition, secrets.token_hex(8)
    client = redis_client.shared(timeout_s=2.0)
    try:
        claimed = bool(client.set(key, token, nx=True, ex=settings.ALERT_INTERVAL_SECONDS))
        if not claimed:
            return False  # already told in this interval (by this process or another)
    except redis.RedisError as exc:
        log.error(
            "alert %s: Redis unreachable, alerting without the once-per-interval guard: %s", condition, exc
        )
        claimed = False
    log.warning("alert %s: %s", condition, text, extra={"alert": condition})
    url = settings.ALERT_WEBHOOK_URL
    if not url:
        return False  # logged; the claim stays, so the log says it once per interval too
    if _deliver(url=url, condition=condition, text=text):
        return True
    if claimed:
        try:
            client.eval(_RELEASE, 1, key, token)
        except redis.RedisError as exc:  # the claim expires by itself: one interval late at worst
            log.error("alert %s: claim not given back: %s", condition, exc)
    return False


def _deliver(*, url: str, condition: str, text: str) -> bool:
    body = json.dumps({"text": f"[outreach] {text}"}).encode()
    request = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=DELIVERY_TIMEOUT_S) as response:
            response.read()
        return True
    except (urllib.error.URLError, OSError, ValueError) as exc:  # HTTPError is a URLError
        log.error("alert %s: webhook delivery failed: %s", condition, exc, extra={"alert": condition})
        return False
