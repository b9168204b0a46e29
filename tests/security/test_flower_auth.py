"""Flower (task names, arguments, worker control) is never served without basic auth: not by the
process group (demo, tests), not by the Procfile, not by docker-compose, and a real Flower
started that way answers 401 to a request without credentials."""

from __future__ import annotations

import base64
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from devtools.processes import ProcessGroup, flower
from devtools.smtp_sink import free_port
from tests.e2e.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


def test_process_group_flower_command_requires_basic_auth() -> None:
    argv = flower(port=5555, basic_auth="ops:s3cret")
    assert "--basic-auth=ops:s3cret" in argv
    assert "--address=127.0.0.1" in argv  # and it listens on loopback only


def test_demo_starts_flower_with_the_configured_credentials() -> None:
    # given a process group that records what it would start
    from demo.run import DemoOptions, start_all

    class Recorder:
        def __init__(self) -> None:
            self.started: dict[str, list[str]] = {}

        def start(self, name: str, argv: list[str]) -> None:
            self.started[name] = argv

    recorder = Recorder()
    # when the demo starts its processes
    start_all(recorder, DemoOptions(seconds=1, leads=1))  # type: ignore[arg-type]
    # then Flower gets FLOWER_BASIC_AUTH
    assert f"--basic-auth={settings.FLOWER_BASIC_AUTH}" in recorder.started["flower"]


def test_procfile_flower_requires_basic_auth() -> None:
    [line] = [ln for ln in (ROOT / "Procfile").read_text().splitlines() if ln.startswith("flower:")]
    assert "--basic-auth=$FLOWER_BASIC_AUTH" in line


def _compose_service(name: str) -> str:
    """The text of one service block of docker-compose.yml (PyYAML is not a dependency)."""
    text = (ROOT / "docker-compose.yml").read_text()
    match = re.search(rf"^  {name}:\n((?:    .*\n|\s*\n)+)", text, re.M)
    assert match, f"no service {name!r} in docker-compose.yml"
    return match.group(1)


def test_compose_flower_passes_basic_auth_from_the_environment() -> None:
    # given the compose file's flower service
    block = _compose_service("flower")
    # then its command passes FLOWER_BASIC_AUTH ($$ = a literal $ for the container's shell) ...
    command = next(line for line in block.splitlines() if line.strip().startswith("command:"))
    assert "celery -A config flower" in command
    assert '--basic-auth="$$FLOWER_BASIC_AUTH"' in command
    # ... which the service gets from .env through the shared x-django definition
    assert "<<: *django" in block
    assert re.search(
        r"^x-django: &django\n(?:  .*\n)*?  env_file: \.env\n",
        (ROOT / "docker-compose.yml").read_text(),
        re.M,
    )
    assert re.search(r"^FLOWER_BASIC_AUTH=\S+:\S+", (ROOT / ".env.example").read_text(), re.M)


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
    # given Flower started the way the demo starts it, against the test Redis
    port = free_port()
    env: dict[str, Any] = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings"}
    group = ProcessGroup(log_dir=tmp_path, env=env)
    group.start("flower", flower(port=port, basic_auth="ops:s3cret"))
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until(lambda: _answers(url), timeout_s=60, what="Flower to answer", group=group)
        # then a request without credentials, or with wrong ones, is 401; the right ones get in
        assert _get(url) == 401
        assert _get(url + "api/workers", auth="ops:wrong") == 401
        assert _get(url, auth="ops:s3cret") == 200
    finally:
        group.stop()
