"""docker-compose.yml cannot be run here (no Docker engine): check its shape instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from config.queues import Queue

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


def _services() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text())["services"])


def test_every_process_of_the_product_has_a_service() -> None:
    services = _services()
    expected = {"postgres", "redis", "web", "beat", "flower", "llm-sim", "smtp-sink"}
    assert expected <= set(services)
    commands = " ".join(str(s.get("command", "")) for s in services.values())
    for queue in Queue:
        assert f"-Q {queue.value} " in commands, f"no worker consumes the {queue.value} queue"


def test_django_processes_share_one_service_definition() -> None:
    services = _services()
    django = [name for name, s in services.items() if name not in {"postgres", "redis"}]
    images = {services[name]["image"] for name in django}
    assert images == {"outreach-orchestrator"}
    assert all(services[name]["env_file"] == ".env" for name in django)


def test_flower_runs_behind_basic_auth() -> None:
    assert "--basic-auth" in str(_services()["flower"]["command"])
