"""/healthz and /readyz: unauthenticated JSON, served before the host check and the HTTPS
redirect, /readyz naming what is not ready with "fail" only: what went wrong is in the log."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection
from django.test import Client

from config.env import database_url
from devtools.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


def test_healthz_answers_without_io_and_without_auth(client: Client) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]


def test_readyz_checks_database_redis_and_broker(client: Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json() == {"status": "ok", "checks": {"database": "ok", "redis": "ok", "broker": "ok"}}


def test_readyz_names_the_failing_check_and_logs_why(
    client: Client, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # given a Redis URL with a login nobody listens on (the broker is still the test Redis)
    port = free_port()
    settings.REDIS_URL = f"redis://probe-user:s3cret-pass@127.0.0.1:{port}/0"
    # when probed
    with caplog.at_level(logging.WARNING, logger="config.health"):
        response = client.get("/readyz")
    # then not ready, naming redis with "fail" and nothing else: no host, port, user or error
    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "checks": {"database": "ok", "redis": "fail", "broker": "ok"},
    }
    for secret in ("127.0.0.1", str(port), "probe-user", "s3cret", "Error", "refused"):
        assert secret not in response.content.decode()
    # and the details are in the log, for the operator
    [record] = [r for r in caplog.records if r.name == "config.health"]
    assert record.getMessage() == "readiness check redis failed"
    assert record.exc_info is not None
    assert str(port) in str(record.exc_info[1])


def test_probes_skip_the_host_check_and_the_https_redirect(client: Client, settings: Any) -> None:
    # given production-like settings: one public host, HTTPS enforced
    settings.ALLOWED_HOSTS = ["outreach.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    # when a probe reaches the container by IP over plain HTTP
    response = client.get("/healthz", HTTP_HOST="10.0.3.7:8000")
    # then it is answered; any other page from that host is refused
    assert response.status_code == 200
    assert client.get("/admin/login/", HTTP_HOST="10.0.3.7:8000").status_code == 400


def test_probes_refuse_other_methods(client: Client) -> None:
    response = client.post("/readyz")
    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"


@pytest.mark.slow
def test_readyz_is_503_when_migrations_are_not_applied(tmp_path: Path) -> None:
    # given an empty database, never migrated
    db = connection.settings_dict
    name = f"{db['NAME']}_unmigrated"
    admin_dsn = database_url(db, name="postgres")
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        # when a process pointed at it is probed
        script = (
            "import django, json; django.setup(); from django.test import Client; "
            "r = Client().get('/readyz'); print(r.status_code); print(json.dumps(r.json()))"
        )
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DJANGO_DEBUG": "1",
            "DATABASE_URL": database_url(db, name=name),
        }
        done = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
        )
        # then it is not ready, says which check, and the log says what to run
        assert done.returncode == 0, done.stderr
        status, body = done.stdout.strip().splitlines()[-2:]
        assert status == "503"
        assert json.loads(body)["checks"]["database"] == "fail"
        assert "migration" not in body
        assert "migration(s) not applied: run `python manage.py migrate`" in done.stderr
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
