"""The email providers' webhooks configured as in production (tests/nurture/mail/providers.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.nurture.mail.providers import BASIC, MAILGUN_KEY


@pytest.fixture
def provider_secrets(settings: Any) -> None:
    """The webhook secret and Mailgun's signing key, and the deliverability thresholds the
    tests count against (5 % bounces, 0.3 % complaints, over 200 sends, from 20)."""
    settings.ANYMAIL = {
        **settings.ANYMAIL,
        "WEBHOOK_SECRET": BASIC,
        "MAILGUN_WEBHOOK_SIGNING_KEY": MAILGUN_KEY,
    }
    settings.BOUNCE_RATE_MAX, settings.COMPLAINT_RATE_MAX = 0.05, 0.003
    settings.BOUNCE_WINDOW_SENDS, settings.BOUNCE_MIN_SENDS = 200, 20
