"""requirements.txt is what production installs (the Dockerfile installs it alone): the product
must start and import without the demo's and the tests' packages."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Top-level modules of requirements-demo.txt and requirements-dev.txt.
NOT_IN_PRODUCTION = ("aiosmtpd", "matplotlib", "pytest", "hypothesis", "playwright", "openai")
PRODUCT = ("config", "outreach", "nurture", "orchestrator")

# Run in a fresh interpreter: this one has the test tools loaded already.
SCRIPT = """
import importlib, importlib.abc, pkgutil, sys

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (not in requirements.txt)")
        return None

sys.meta_path.insert(0, Absent())
import django

django.setup()  # every installed app (devtools and demo too) loads without them
for package in PRODUCT:
    for module in pkgutil.walk_packages(importlib.import_module(package).__path__, package + "."):
        importlib.import_module(module.name)
print("imported")
"""


@pytest.mark.slow
def test_the_product_imports_without_demo_and_test_packages() -> None:
    # given an interpreter in which the demo and test packages cannot be imported
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "DJANGO_DEBUG": "1"}
    script = f"BLOCKED = {NOT_IN_PRODUCTION!r}\nPRODUCT = {PRODUCT!r}\n{SCRIPT}"
    # when Django starts and every module of the product is imported
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    # then nothing asked for them
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("imported")


def test_production_requirements_leave_out_the_demo_and_test_packages() -> None:
    runtime = (ROOT / "requirements.txt").read_text().lower()
    for package in NOT_IN_PRODUCTION:
        assert f"{package}==" not in runtime
