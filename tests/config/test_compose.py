"""docker-compose.yml cannot be run here (no Docker engine): check its shape and what it runs, and
that it and the Procfile run each queue's worker exactly as the recipe (config/workers.py) says.

A structural check stands in for `docker compose config`: the keys and values the Compose
specification allows for what this file uses, then the properties a deployment relies on.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings

from config import gunicorn
from config.queues import Queue
from config.workers import WORKERS, database_connections_peak
from devtools.procfile import procfile_commands

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
INFRA = {"postgres", "redis"}
SERVICE_KEYS = {
    "build",
    "image",
    "command",
    "environment",
    "env_file",
    "depends_on",
    "restart",
    "ports",
    "volumes",
    "healthcheck",
    "profiles",
}
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
    # the product's processes run the `product` stage; the sim profile's stand-ins a stage above it
    services = _services()
    django = [name for name in services if name not in INFRA]
    for name in django:
        assert services[name]["env_file"] == [{"path": ".env", "required": False}], name
    assert {services[name]["image"] for name in _product()} == {"outreach-orchestrator"}
    assert {services[name]["build"]["target"] for name in _product()} == {"product"}
    assert {services[name]["build"]["target"] for name in ("llm-sim", "smtp-sink")} == {"sim"}
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "AS product" in dockerfile
    assert "FROM product AS sim" in dockerfile


def test_flower_and_web_are_published_on_loopback_only() -> None:
    # the TLS proxy on the host reaches web there; nothing reaches either from outside
    assert _services()["flower"]["ports"] == ["127.0.0.1:5555:5555"]
    assert _services()["web"]["ports"] == ["127.0.0.1:8000:8000"]


def test_release_only_migrates() -> None:
    # static files are collected when the image is built: a release container's files vanish
    # with it, so collectstatic there was work thrown away
    assert procfile_commands()["release"] == "python manage.py migrate --noinput"


def test_database_url_comes_from_dotenv_with_the_bundled_default() -> None:
    # `environment:` wins over env_file: a fixed value there would hide the one in .env
    environment = _compose()["x-django"]["environment"]
    assert (
        environment["DATABASE_URL"] == "${DATABASE_URL:-postgres://outreach:outreach@postgres:5432/outreach}"
    )


def test_postgres_max_connections_covers_the_recipes_peak_with_margin() -> None:
    # given the most connections the recipe's processes can hold at once (README "Deploy")
    peak = database_connections_peak(
        generation_db_connections=settings.GENERATION_DB_CONNECTIONS,
        web_processes=gunicorn.workers,
        web_threads=gunicorn.threads,
    )
    # then compose's PostgreSQL allows half as many again, plus its superuser reserve (3)
    command = " ".join(_services()["postgres"]["command"])
    found = re.search(r"max_connections=(\d+)", command)
    assert found, f"postgres command sets no max_connections: {command}"
    assert int(found[1]) >= peak * 1.5 + 3, (int(found[1]), peak)


def test_redis_never_evicts_keys() -> None:
    # the budget's counters, leases and locks (and Celery's queue on a Redis broker) must not be
    # dropped under memory pressure: noeviction makes a full Redis refuse writes instead
    command = _services()["redis"]["command"]
    assert command[command.index("--maxmemory-policy") + 1] == "noeviction"


def test_image_leaves_secrets_and_local_state_out() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".env", ".venv", "var/", ".git"} <= ignored


def test_every_queue_has_a_worker_recipe() -> None:
    # A queue added to config/queues.py without a recipe row would have no worker anywhere.
    assert set(WORKERS) == set(Queue)
    assert all(recipe.queue == queue for queue, recipe in WORKERS.items())


def test_procfile_worker_lines_are_the_recipe() -> None:
    # given the production Procfile
    procfile = procfile_commands()
    # then each queue's line is the recipe's command, under the queue's name
    for recipe in WORKERS.values():
        assert procfile.get(recipe.name) == recipe.command(), f"Procfile line {recipe.name!r}"
    workers = {name for name, command in procfile.items() if " worker " in f" {command} "}
    assert workers == {recipe.name for recipe in WORKERS.values()}, "a worker line with no recipe"


def test_compose_worker_services_are_the_recipe() -> None:
    services = _services()
    for recipe in WORKERS.values():
        assert services[recipe.service]["command"] == recipe.command(), f"compose service {recipe.service!r}"
    workers = {name for name, s in services.items() if " worker " in f" {s.get('command', '')} "}
    assert workers == {recipe.service for recipe in WORKERS.values()}, "a worker service with no recipe"


def test_generation_runs_many_calls_per_process() -> None:
    # The sizing rule of config/workers.py, written out: a 3,000 rpm key at a 3 s median
    # latency needs 150 calls in flight; prefork would need 150 processes of ~130 MB.
    generation = WORKERS[Queue.GENERATION]
    assert generation.pool == "threads"
    assert generation.concurrency >= 3000 / 60 * 3
    assert "--pool threads --concurrency 200" in procfile_commands()["generation"]
