"""Email providers' tracking webhooks as the providers call them: each one's documented payload
shape and its own authentication, posted to the real endpoints (`/hooks/anymail/<esp>/tracking/`).
The shapes follow the providers' docs and django-anymail's own tests."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any

from django.test import Client
from django.utils import timezone

from outreach.models import Lead, Owner, State
from tests.factories import make_lead, make_outreach

BASIC = "anymail:s3cret"
MAILGUN_KEY = "mailgun-signing-key"


def emailed(owner: Owner, n: int, **lead_fields: Any) -> list[Lead]:
    """`n` leads of `owner`, each sent one email."""
    leads = [make_lead(owner=owner, **lead_fields) for _ in range(n)]
    for lead in leads:
        make_outreach(lead=lead, state=State.SENT, sent_at=timezone.now())
    return leads


def basic(auth: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}


def sendgrid(client: Client, events: list[dict[str, Any]], *, auth: str = BASIC) -> Any:
    """SendGrid's Event Webhook: a JSON array, HTTP basic auth in the URL it was given."""
    return client.post(
        "/hooks/anymail/sendgrid/tracking/",
        data=json.dumps(events),
        content_type="application/json",
        headers=basic(auth),
    )


def sendgrid_event(email: str, event: str, **extra: Any) -> dict[str, Any]:
    """One SendGrid event; `anymail_id` (the id anymail's backend put in custom_args, which
    SendGrid echoes in every event) and `smtp-id` (the message's Message-ID) go in `extra`."""
    return {
        "email": email,
        "timestamp": int(time.time()),
        "event": event,
        "sg_event_id": f"evt-{email}-{event}",
        "sg_message_id": "14c5d75ce93.dfd.64b469.filter0001.16648.5515E0B88.0",
        **extra,
    }


def mailgun(client: Client, event_data: dict[str, Any], *, key: str = MAILGUN_KEY) -> Any:
    """Mailgun's webhooks: JSON with a signature block, an HMAC-SHA256 of timestamp + token
    (and the basic auth in the URL it was given, as for every provider)."""
    timestamp, token = str(int(time.time())), "a8ce0edb2dd8301dee6c2405235584e45aa91d1e9f979f3de0"
    signature = hmac.new(key.encode(), f"{timestamp}{token}".encode(), hashlib.sha256).hexdigest()
    payload = {
        "signature": {"timestamp": timestamp, "token": token, "signature": signature},
        "event-data": {"timestamp": time.time(), "id": "Ase7i2zsRYeDXztHGENqRA", **event_data},
    }
    return client.post(
        "/hooks/anymail/mailgun/tracking/",
        data=json.dumps(payload),
        content_type="application/json",
        headers=basic(BASIC),
    )


def postmark(client: Client, event: dict[str, Any], *, auth: str = BASIC) -> Any:
    """Postmark's webhooks: one JSON event per request, HTTP basic auth in the URL it was given."""
    return client.post(
        "/hooks/anymail/postmark/tracking/",
        data=json.dumps(event),
        content_type="application/json",
        headers=basic(auth),
    )


def postmark_bounce(
    email: str, kind: str, *, message_id: str = "883953f4-6105-42a2-a16a-77a8eac79483"
) -> dict[str, Any]:
    """Postmark's bounce webhook (RecordType Bounce, or SpamComplaint); `MessageID` is
    Postmark's id for the message, what its send API answered."""
    return {
        "RecordType": "Bounce" if kind != "SpamComplaint" else "SpamComplaint",
        "ID": 4323372036854775807,
        "Type": kind,
        "TypeCode": 1,
        "MessageID": message_id,
        "Description": "The server was unable to deliver your message (ex: unknown user, mailbox not found).",
        "Details": "smtp;550 5.1.1 The email account that you tried to reach does not exist.",
        "Email": email,
        "BouncedAt": "2026-11-23T02:00:00Z",
        "Inactive": True,
    }


def postmark_subscription_change(
    email: str, *, message_id: str, suppress: bool = True, reason: str = "ManualSuppression"
) -> dict[str, Any]:
    """Postmark's Subscription Change webhook: the recipient unsubscribed (SuppressSending true,
    SuppressionReason ManualSuppression), or was reactivated (SuppressSending false)."""
    return {
        "RecordType": "SubscriptionChange",
        "MessageID": message_id,
        "ServerID": 23,
        "MessageStream": "outbound",
        "ChangedAt": "2026-11-23T02:00:00Z",
        "Recipient": email,
        "Origin": "Recipient",
        "SuppressSending": suppress,
        "SuppressionReason": reason if suppress else None,
        "Tag": "",
        "Metadata": {},
    }
