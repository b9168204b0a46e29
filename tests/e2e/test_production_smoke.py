"""The production recipe, run as written: the image build's collectstatic, the Procfile's release
step, web (gunicorn), workers and beat with DJANGO_DEBUG=0 and production-style settings,
behind a TLS-terminating proxy (here: the browser sends the X-Forwarded-Proto header such a
proxy adds). The health probes answer, the admin's login page loads its stylesheet in a real
browser, a signed reply arrives over plain HTTP and the workers answer it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from playwright.sync_api import BrowserContext

from config.env import database_url
from devtools.llm_stub import LLMStub
from devtools.processes import ProcessGroup, free_port
from devtools.procfile import procfile_argv, procfile_commands
from devtools.smtp_sink import SMTPSink
from nurture.intake.replies import signature_header
from outreach.models import Outreach, State
from outreach.tiers import Tier
from tests.e2e.conftest import ARTIFACTS, SHOTS, purge_broker, wait_until
from tests.factories import make_lead, make_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
# Every process the Procfile runs, but the one-off release step and Flower (an operator's view).
LONG_RUNNING = [name for name in procfile_commands() if name not in ("release", "flower")]


def _production_env(
    *, port: int, static_root: Path, llm: LLMStub, smtp: SMTPSink, tmp: Path
) -> dict[str, str]:
    db = connection.settings_dict
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "LLM", "WEBHOOK", "FLOWER"))}
    return {
        **clean,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "DJANGO_SECURE_SSL_REDIRECT": "1",
        "DJANGO_SECURE_PROXY_SSL_HEADER": "1",
        "DJANGO_STATIC_ROOT": str(static_root),
        "DATABASE_URL": database_url(db),
        "REDIS_URL": django_settings.REDIS_URL,
        "CELERY_BROKER_URL": django_settings.CELERY_BROKER_URL,
        "LLM_BASE_URL": llm.base_url,
        "LLM_API_KEY": "sk-smoke",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp.port),
        "WEBHOOK_SECRET": "whsec-smoke",
        "FLOWER_BASIC_AUTH": "ops:smoke",
        "PUBLIC_BASE_URL": f"https://127.0.0.1:{port}",
        "DEFAULT_FROM_EMAIL": "outreach@smoke.example",
        "METRICS_TOKEN": "metrics-smoke",
        "DISPATCH_INTERVAL": "1",
        "BEAT_HEARTBEAT_FILE": str(tmp / "beat.heartbeat"),
        "WEB_CONCURRENCY": "1",
        "PORT": str(port),
    }


def _get(url: str, *, headers: dict[str, str] | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=5) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_procfile_stack_with_production_settings_serves_admin_probes_and_webhook(
    tmp_path: Path, browser: BrowserContext, llm_stub: LLMStub, smtp_sink: SMTPSink, redis_client: Any
) -> None:
    # given the image build's step (static files collected under hashed names, the Dockerfile's
    # `manage.py collectstatic`) and the release step (migrations, already applied to the test
    # database), with production settings
    port = free_port()
    env = _production_env(
        port=port, static_root=tmp_path / "static", llm=llm_stub, smtp=smtp_sink, tmp=tmp_path
    )
    build = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    assert (tmp_path / "static" / "staticfiles.json").exists()  # the manifest whitenoise serves from
    release = subprocess.run(
        procfile_argv("release"), cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
    )
    assert release.returncode == 0, release.stdout[-2000:] + release.stderr[-2000:]
    # and a lead who will write to us
    lead = make_lead(owner=make_owner(), email="pat@prospect.example")
    # when the Procfile's web, beat and workers start as written
    purge_broker()
    group = ProcessGroup(log_dir=ARTIFACTS / "production-smoke", env=env)
    try:
        for name in LONG_RUNNING:
            group.start(name, procfile_argv(name))
        base = f"http://127.0.0.1:{port}"
        # then the probes answer over plain HTTP, without the proxy header
        wait_until(lambda: _probe(f"{base}/readyz") == 200, timeout_s=60, what="/readyz", group=group)
        body = _get(f"{base}/readyz")[1]
        assert json.loads(body)["checks"] == {"database": "ok", "redis": "ok", "broker": "ok"}
        assert _get(f"{base}/healthz")[0] == 200
        # and pages reached without TLS are sent to HTTPS
        assert _get(f"{base}/admin/login/")[0] == 301
        # and behind the proxy the admin's login page loads with its stylesheet
        _admin_login_is_styled(browser, base)
        # and a signed reply posted over plain HTTP is recorded ...
        payload = {
            "lead_email": lead.email,
            "message_id": "<r1@prospect.example>",
            "subject": "Re: hi",
            "body": "Yes",
        }
        raw = json.dumps(payload).encode()
        request = urllib.request.Request(
            f"{base}/hooks/replies/",
            data=raw,
            method="POST",
            headers={
                "Content-Type": "application/json",
                "X-Signature": signature_header(body=raw, secret="whsec-smoke", timestamp=int(time.time())),
            },
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 202
            reply_id = json.loads(response.read())["outreach_id"]
        # ... and answered by the workers beat drives
        wait_until(
            lambda: Outreach.objects.get(pk=reply_id).state == State.SENT,
            timeout_s=60,
            what="the answer",
            group=group,
        )
        assert Outreach.objects.get(pk=reply_id).tier == Tier.REPLY
        smtp_sink.wait_for(1)
        # and beat's heartbeat is fresh
        assert (
            subprocess.run(
                [sys.executable, "-m", "config.liveness", "beat"], cwd=ROOT, env=env, timeout=60
            ).returncode
            == 0
        )
    finally:
        group.stop()


def _probe(url: str) -> int:
    try:
        return _get(url)[0]
    except OSError:
        return 0


def _admin_login_is_styled(browser: BrowserContext, base: str) -> None:
    page = browser.new_page()
    page.set_extra_http_headers({"X-Forwarded-Proto": "https"})  # as the TLS proxy in front adds it
    stylesheets: list[tuple[str, int]] = []
    page.on("response", lambda r: stylesheets.append((r.url, r.status)) if r.url.endswith(".css") else None)
    page.goto(f"{base}/admin/login/")
    page.screenshot(path=SHOTS / "production-admin-login.png")
    base_css = [(url, status) for url, status in stylesheets if "/static/admin/css/base." in url]
    assert base_css, f"no admin stylesheet requested: {stylesheets}"
    assert all(status == 200 for _, status in base_css), base_css
    assert ".css" in base_css[0][0]
    assert base_css[0][0].split("/")[-1] != "base.css"  # hashed name: cached for ever by whitenoise
    # the rules really applied: Django's admin header is not the browser's default transparent
    header = page.evaluate("getComputedStyle(document.querySelector('#header')).backgroundColor")
    assert header not in ("rgba(0, 0, 0, 0)", "transparent"), header
    page.close()
