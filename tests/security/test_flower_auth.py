"""Flower (task names, arguments, worker control) is never served without basic auth, and its
password is never on a command line: basic auth comes from FLOWER_BASIC_AUTH through
flowerconfig.py, for the process group (demo, tests), the Procfile and docker-compose alike,
and a real Flower started that way answers 401 to a request without credentials."""

from __future__ import annotations

import base64
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools.processes import ProcessGroup, flower
from devtools.smtp_sink import free_port
from tests.e2e.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_no_flower_command_line_carries_the_password() -> None:
    # `ps` shows every process's command line to every user of the machine
    argv = flower(port=5555)
    assert "--address=127.0.0.1" in argv  # loopback only
    [line] = [ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("flower:")]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["flower"]["command"]
    for command in (" ".join(argv), line, compose):
        assert "basic-auth" not in command
        assert "BASIC_AUTH" not in command


def test_flowerconfig_takes_basic_auth_from_the_setting() -> None:
    assert "basic_auth = [settings.FLOWER_BASIC_AUTH]" in (ROOT / "flowerconfig.py").read_text()


def _get(url: str, *, auth: str | None = None) -> int:
    request = urllib.request.Request(url)
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _answers(url: str) -> bool:
    try:
        _get(url)
    except OSError:  # not listening yet
        return False
    return True


@pytest.mark.slow
def test_real_flower_refuses_requests_without_credentials(tmp_path: Path) -> None:
    # given Flower started the way the demo starts it, against the test Redis, with the setting
    port = free_port()
    env: dict[str, Any] = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "FLOWER_BASIC_AUTH": "ops:s3cret",
    }
    group = ProcessGroup(log_dir=tmp_path, env=env)
    group.start("flower", flower(port=port))
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until(lambda: _answers(url), timeout_s=60, what="Flower to answer", group=group)
        # then a request without credentials, or with wrong ones, is 401; the right ones get in
        assert _get(url) == 401
        assert _get(url + "api/workers", auth="ops:wrong") == 401
        assert _get(url, auth="ops:s3cret") == 200
    finally:
        group.stop()
