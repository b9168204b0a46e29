"""promtool for the tests of the shipped rules and dashboard: scripts/ensure_promtool.sh finds it,
or extracts it from Debian's `prometheus` package (without installing the server)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "prometheus" / "alerts.yml"
ALERT_TESTS = Path(__file__).with_name("alerts_test.yml")


@pytest.fixture(scope="session")
def promtool() -> str:
    found = subprocess.run(
        [str(ROOT / "scripts" / "ensure_promtool.sh")], capture_output=True, text=True, timeout=300
    )
    assert found.returncode == 0, f"promtool unavailable (scripts/ensure_promtool.sh): {found.stderr}"
    return found.stdout.strip().splitlines()[-1]


def promtool_run(promtool: str, *args: str) -> str:
    done = subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
