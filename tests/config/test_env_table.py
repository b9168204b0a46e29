"""The README's configuration table is the list of environment variables the product reads:
every variable read through config/env.py (or by the web server's config/gunicorn.py and the
settings' env-file switch) has a row, and every row names variables that are read. A
variable added to the code without a row, or a row left behind by a removed one, fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("config", "outreach", "orchestrator", "nurture")
NAME = re.compile(r"[A-Z][A-Z0-9_]+")
# Read by the test settings only (config/test_settings.py), never by a deployment.
TEST_ONLY = {"TEST_DB_NAME"}


def _read_by_code() -> set[str]:
    """Names given to a config.env reader (`env_int("LLM_RPM", ...)`; env_prefixed's prefix as
    `ANYMAIL_<NAME>`) or read from os.environ in config/ (gunicorn, the env-file switch)."""
    names: set[str] = set()
    files = [p for package in PRODUCT for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            value, func = node.args[0].value, node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            environ = isinstance(func, ast.Attribute) and ast.unparse(func.value) == "os.environ"
            if not isinstance(value, str) or not (called.startswith("env_") or (environ and called == "get")):
                continue
            if called == "env_prefixed":
                names.add(f"{value}<NAME>")
            elif NAME.fullmatch(value):
                names.add(value)
    return names - TEST_ONLY


def _in_readme_table() -> set[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("| variable | default | meaning |")
    names: set[str] = set()
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        first_cell = line.split("|")[1]
        names |= set(re.findall(r"`([A-Z][A-Z0-9_]+(?:<NAME>)?)`", first_cell))
    return names


def test_every_variable_read_has_a_row_in_the_readme_and_every_row_is_read() -> None:
    read, documented = _read_by_code(), _in_readme_table()
    assert sorted(read - documented) == [], "read by the code, missing from README's configuration table"
    assert sorted(documented - read) == [], "in README's configuration table, read by nothing"
