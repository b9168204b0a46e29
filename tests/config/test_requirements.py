"""requirements.txt is what production installs (the Dockerfile installs its hashed lock,
requirements.lock, alone): the product must start and import without the demo's and the tests'
packages, every package it imports is declared there, and the lock agrees with it."""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Top-level modules of requirements-demo.txt and requirements-dev.txt.
NOT_IN_PRODUCTION = ("aiosmtpd", "matplotlib", "pytest", "hypothesis", "playwright", "openai")
PRODUCT = ("config", "outreach", "nurture", "orchestrator")
LOCK = "requirements.lock"  # requirements.txt compiled with hashes: what the image installs

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


def _requirement_names(path: Path) -> dict[str, str]:
    """Canonical name -> pinned version, for the `name==version` lines of a requirements file."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        found = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\#]+)", line)
        if found:
            pins[_canonical(found[1])] = found[2]
    return pins


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_third_party_module_the_product_imports_is_declared() -> None:
    # given the top-level modules the product's code imports
    first_party = {p.name for p in ROOT.iterdir() if p.is_dir()} | {p.stem for p in ROOT.glob("*.py")}
    imported: dict[str, Path] = {}
    for package in (*PRODUCT, "backoffice"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    imported.setdefault(name.split(".")[0], path)
    third_party = {
        m: p for m, p in imported.items() if m not in sys.stdlib_module_names and m not in first_party
    }
    # then each comes from a distribution requirements.txt names itself, not one that only
    # happens to be installed as another's dependency
    declared = set(_requirement_names(ROOT / "requirements.txt"))
    distributions = importlib.metadata.packages_distributions()
    for module, path in sorted(third_party.items()):
        provided = {_canonical(d) for d in distributions.get(module, [])}
        assert provided & declared, (
            f"{module} (imported by {path.relative_to(ROOT)}) is not in requirements.txt"
        )


def test_the_lock_file_pins_requirements_txt_with_hashes() -> None:
    # given requirements.txt and its lock (pip-compile --generate-hashes, README "Deploy")
    wanted = _requirement_names(ROOT / "requirements.txt")
    lock = (ROOT / LOCK).read_text()
    locked = _requirement_names(ROOT / LOCK)
    # then every requirement is locked at the version requirements.txt pins...
    for name, version in wanted.items():
        assert locked.get(name) == version, f"{name}: requirements.txt {version}, {LOCK} {locked.get(name)}"
    # ...the lock's direct requirements are exactly requirements.txt's (none dropped or added
    # since it was compiled), and every package, dependencies too, carries its hashes
    entries = re.split(r"\n(?=[A-Za-z0-9])", lock)[1:]  # one per package; [0] is the header
    direct = set()
    for entry in entries:
        name = _canonical(re.split(r"[=\[]", entry, maxsplit=1)[0])
        assert "--hash=sha256:" in entry, f"{LOCK}: {name} has no hash"
        if re.search(r"#\s+(?:via\s+)?-r requirements\.txt", entry):
            direct.add(name)
    assert direct == set(wanted), (sorted(direct - set(wanted)), sorted(set(wanted) - direct))


def test_the_image_installs_the_lock_and_nothing_else() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    product = installs[0]  # the product stage's; the sim stage adds the demo's stand-ins
    assert "--require-hashes" in product.split(), product
    assert f"-r {LOCK}" in product, product
    assert f"COPY {LOCK} ." in dockerfile
