"""A process that runs tasks freezes its start-up heap out of the garbage collector's scans and
collects its young generation less often (config.collector), set by the worker's signals."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config.collector import GC_YOUNG

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("signal", ["worker_init", "worker_process_init"])
def test_a_worker_and_each_prefork_child_settle_the_collector_once_started(signal: str) -> None:
    # given a process with the app loaded, its collector as CPython starts it
    script = (
        "import gc, django; django.setup(); from celery import signals; import config.celery; "
        "print(gc.get_freeze_count(), gc.get_threshold()[0]); "
        f"signals.{signal}.send(sender=None); "
        "print(gc.get_freeze_count(), gc.get_threshold()[0])"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "1"}
    # when the worker's start-up signal fires in it
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    (frozen_before, young_before), (frozen, young) = (
        map(int, line.split()) for line in done.stdout.strip().splitlines()[-2:]
    )
    # then what it had loaded is frozen and the young generation waits GC_YOUNG allocations
    assert (frozen_before, young_before) == (0, 700)
    assert frozen > 50_000
    assert young == GC_YOUNG
