"""docker-compose.yml cannot be run here (no Docker engine): check its shape and what it runs.

A structural check stands in for `docker compose config`: the keys and values the Compose
specification allows for what this file uses, then the properties a deployment relies on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from config.queues import Queue
from devtools.procfile import procfile_commands

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
INFRA = {"postgres", "redis"}
SERVICE_KEYS = {
    "build", "image", "command", "environment", "env_file", "depends_on", "restart", "ports",
    "volumes", "healthcheck", "profiles",
}  # fmt: skip
HEALTHCHECK_KEYS = {"test", "interval", "timeout", "retries", "start_period"}
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


def _compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def _services() -> dict[str, Any]:
    return dict(_compose()["services"])


def _product() -> dict[str, Any]:
    return {name: s for name, s in _services().items() if name not in INFRA and "profiles" not in s}


def test_compose_file_has_the_shape_the_specification_allows() -> None:
    compose = _compose()
    assert set(compose) <= {"services", "volumes"} | {k for k in compose if k.startswith("x-")}
    for name, service in compose["services"].items():
        assert set(service) <= SERVICE_KEYS, f"{name}: unknown keys {set(service) - SERVICE_KEYS}"
        assert "image" in service or "build" in service, name
        depends = service.get("depends_on", {})
        assert isinstance(depends, (dict, list)), name
        for dependency, rule in depends.items() if isinstance(depends, dict) else []:
            assert dependency in compose["services"], f"{name} depends on unknown {dependency}"
            assert rule["condition"] in CONDITIONS, f"{name}: {rule}"
        check = service.get("healthcheck")
        if check:
            assert set(check) <= HEALTHCHECK_KEYS, f"{name}: {set(check) - HEALTHCHECK_KEYS}"
            assert check["test"][0] in {"CMD", "CMD-SHELL"}, name
        for port in service.get("ports", []):
            assert str(port).count(":") in {1, 2}, f"{name}: port {port}"
    for volume in compose.get("volumes", {}):
        assert any(volume in str(s.get("volumes", "")) for s in compose["services"].values())


def test_every_process_of_the_product_has_a_service() -> None:
    services = _services()
    expected = {"postgres", "redis", "migrate", "web", "beat", "flower", "llm-sim", "smtp-sink"}
    assert expected <= set(services)
    commands = " ".join(str(s.get("command", "")) for s in services.values())
    for queue in Queue:
        assert f"-Q {queue.value} " in commands, f"no worker consumes the {queue.value} queue"


def test_compose_runs_the_procfile_commands() -> None:
    # one recipe: every long-running Procfile process runs in compose with the same command
    # (Flower binds every interface inside its container, published on the host's loopback)
    procfile = procfile_commands()
    commands = {str(s["command"]) for s in _product().values() if "command" in s}
    for name, command in procfile.items():
        if name in {"release", "flower"}:
            continue
        assert command in commands, f"Procfile {name!r} is not run by compose: {command}"
    assert procfile["flower"].replace("--address=127.0.0.1", "--address=0.0.0.0") in commands


def test_everything_waits_for_the_one_shot_migration() -> None:
    services = _services()
    migrate = services["migrate"]
    assert "migrate" in migrate["command"]
    assert migrate["restart"] == "no"
    for name, service in _product().items():
        if name == "migrate":
            continue
        assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name


def test_every_long_running_service_has_a_healthcheck() -> None:
    # the one-shot migration is judged by its exit status instead
    for name, service in _services().items():
        if service.get("restart") == "no":
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"


def test_no_development_server_in_production_files() -> None:
    for path in ("Procfile", "docker-compose.yml", "Dockerfile"):
        assert "runserver" not in (ROOT / path).read_text(), path
    assert _services()["web"]["command"].startswith("gunicorn config.wsgi")


def test_django_processes_share_one_service_definition_and_optional_dotenv() -> None:
    services = _services()
    django = [name for name in services if name not in INFRA]
    assert {services[name]["image"] for name in django} == {"outreach-orchestrator"}
    for name in django:
        assert services[name]["env_file"] == [{"path": ".env", "required": False}], name


def test_flower_is_published_on_loopback_only() -> None:
    assert _services()["flower"]["ports"] == ["127.0.0.1:5555:5555"]


def test_image_leaves_secrets_and_local_state_out() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".env", ".venv", "var/", ".git"} <= ignored
