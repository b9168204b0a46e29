"""Settings for the test suite: real PostgreSQL and Redis (never SQLite, never eager Celery).

TEST_DB_NAME and REDIS_URL let two test runs on one machine keep out of each other's way.
"""

from __future__ import annotations

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/outreach")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/15")
os.environ.setdefault("DJANGO_DEBUG", "1")
# Replies answered at once, as before the quiet period (docs/dispatch.md): the suite's timing
# assumes it; the tests of the quiet period set their own. Set in the environment, not below,
# so the workers an end-to-end test starts (config.settings) inherit it too.
os.environ.setdefault("REPLY_QUIET_S", "0")

from config.settings import *  # noqa: F403
from config.settings import ANYMAIL, DATABASES

DATABASES["default"]["TEST"] = {"NAME": os.environ.get("TEST_DB_NAME", "test_outreach")}
# Tests scrape /metrics right after changing rows: the cache would hand them an earlier test's
# text (tests/orchestrator/metrics/test_scrape.py turns it on).
METRICS_CACHE_S = 0.0
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast test users
# The email providers' webhooks exist only with a basic-auth secret (config/urls.py).
ANYMAIL = {**ANYMAIL, "WEBHOOK_SECRET": "anymail:test-secret"}
