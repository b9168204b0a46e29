"""demo.run: the inbound replies the demo posts are signed the way the webhook checks."""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import urlsplit

import pytest

from demo.run import DemoOptions, post_reply
from outreach.models import Outreach, State
from tests.factories import make_outreach


@pytest.mark.django_db(transaction=True)
def test_the_demos_reply_is_accepted_by_the_webhook(live_server: Any, settings: Any) -> None:
    # given a server with a webhook secret, and an email the demo can pretend was answered
    settings.WEBHOOK_SECRET = "demo-test-secret"
    sent = make_outreach(state=State.SENT, draft_subject="Hello", message_id="<s1@seller.example>")
    opts = DemoOptions(seconds=None, leads=0, web_port=urlsplit(live_server.url).port or 80)
    # when the demo posts a reply to it
    status = post_reply(opts=opts, rng=random.Random(1))
    # then the signature is accepted and the reply is queued for that lead
    assert status == 202
    assert Outreach.objects.filter(lead=sent.lead, kind=Outreach.Kind.REPLY).count() == 1
