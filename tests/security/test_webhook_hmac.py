"""The reply webhook's signature check is constant-time (hmac.compare_digest, every candidate,
no early exit) and refuses replays outside the 5-minute window; inside it the message_id makes a
replay a no-op. (Signature, payload and fuzz cases: tests/nurture/intake/test_webhook.py.)"""

from __future__ import annotations

import ast
import hmac
import inspect
import json
import textwrap
import time
from typing import Any

import pytest
from django.test import Client

from nurture.intake import replies
from nurture.intake.replies import SignatureError, signature_header, signature_verify
from outreach.models import Outreach, State
from tests.factories import make_lead, make_outreach

SECRET = "test-webhook-secret"
BODY = b'{"lead_email": "a@b.example"}'


def test_every_candidate_signature_is_compared_with_compare_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    # given a spy around hmac.compare_digest, and a header with three v1 values, the right one first
    calls: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(replies.hmac, "compare_digest", spy)
    now = time.time()
    good = signature_header(body=BODY, secret=SECRET, timestamp=int(now))
    header = f"{good},v1={'0' * 64},v1={'f' * 64}"
    # when it is verified
    signature_verify(header=header, body=BODY, secret=SECRET, now=now)
    # then all three candidates went through compare_digest: a match does not stop the loop early
    expected = good.split("v1=")[1]
    assert [b for _, b in calls] == [expected, "0" * 64, "f" * 64]
    assert {a for a, _ in calls} == {expected}


def test_signature_check_has_no_plain_equality_on_secrets() -> None:
    # == on the MAC would leak, through timing, how many leading characters matched
    tree = ast.parse(textwrap.dedent(inspect.getsource(signature_verify)))
    names_compared = {
        node.id
        for compare in ast.walk(tree)
        if isinstance(compare, ast.Compare) and any(isinstance(op, ast.Eq | ast.NotEq) for op in compare.ops)
        for side in [compare.left, *compare.comparators]
        for node in ast.walk(side)
        if isinstance(node, ast.Name)
    }
    assert not names_compared & {"expected", "candidate", "candidates", "secret", "header"}


@pytest.mark.parametrize("skew_s", [-301, 301, -3600, 10**9])
def test_a_captured_request_replayed_outside_the_window_is_refused(skew_s: int) -> None:
    now = time.time()
    header = signature_header(body=BODY, secret=SECRET, timestamp=int(now))
    with pytest.raises(SignatureError, match="more than 5 minutes"):
        signature_verify(header=header, body=BODY, secret=SECRET, now=now + skew_s)


@pytest.mark.django_db
def test_a_captured_request_replayed_inside_the_window_changes_nothing(client: Client, settings: Any) -> None:
    # given a signed reply captured off the wire
    settings.WEBHOOK_SECRET = SECRET
    lead = make_lead()
    make_outreach(lead=lead, state=State.SENT, message_id="<intro@us>")
    body = json.dumps(
        {
            "lead_email": lead.email,
            "message_id": "<r1@prospect.example>",
            "subject": "Re: hi",
            "body": "Yes please.",
        }
    ).encode()
    headers = {"X-Signature": signature_header(body=body, secret=SECRET, timestamp=int(time.time()))}
    # when it is delivered, then replayed twice within the window
    codes = [
        client.post(
            "/hooks/replies/", data=body, content_type="application/json", headers=headers
        ).status_code
        for _ in range(3)
    ]
    # then all are accepted, but one reply was queued: the message_id is the idempotency key
    assert all(code < 300 for code in codes), codes
    assert Outreach.objects.filter(lead=lead, kind=Outreach.Kind.REPLY).count() == 1
