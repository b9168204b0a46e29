"""docker-compose.yml cannot be run here (no Docker engine): check its shape instead, and that it
and the Procfile run each queue's worker exactly as the recipe (config/workers.py) says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from config.queues import Queue
from config.workers import WORKERS

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
PROCFILE = ROOT / "Procfile"


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


def _procfile() -> dict[str, str]:
    lines = [line for line in PROCFILE.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return {name.strip(): command.strip() for name, _, command in (line.partition(":") for line in lines)}


def test_every_queue_has_a_worker_recipe() -> None:
    # A queue added to config/queues.py without a recipe row would have no worker anywhere.
    assert set(WORKERS) == set(Queue)
    assert all(recipe.queue == queue for queue, recipe in WORKERS.items())


def test_procfile_worker_lines_are_the_recipe() -> None:
    # given the production Procfile
    procfile = _procfile()
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
    assert "--pool threads --concurrency 200" in _procfile()["generation"]
