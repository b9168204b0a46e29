"""Arrows point down: the records and the state machine (outreach) import none of the apps built
on them. A lower layer importing an upper one ties the records to whoever uses them; the code
belongs in the app that owns the behaviour (e.g. the lead admin's "Mark converted" in nurture)."""

from __future__ import annotations

import ast
from pathlib import Path

import outreach

UPPER_APPS = ("nurture", "orchestrator", "demo")


def imported_modules(source: str) -> list[str]:
    """Every module an `import` or `from ... import` names, at any depth (function-local too)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def upper_imports(source: str) -> list[str]:
    return [m for m in imported_modules(source) if m.split(".")[0] in UPPER_APPS]


def test_upper_imports_finds_top_level_and_function_local_imports() -> None:
    # given a module importing an upper app at the top and inside a function, and a lookalike
    source = (
        "from nurture.intake.sequence import lead_mark_converted\n"
        "import outreach.models\n"
        "import nurture_stats\n"
        "def f():\n"
        "    from orchestrator import budget\n"
        "    import demo.seed\n"
    )
    # then exactly the upper apps' imports are found
    assert upper_imports(source) == ["nurture.intake.sequence", "orchestrator", "demo.seed"]


def test_outreach_imports_no_upper_app() -> None:
    # given every Python module of the outreach package (migrations and commands included)
    root = Path(outreach.__file__).parent
    # when their imports are read
    found = {
        str(path.relative_to(root)): upper
        for path in sorted(root.rglob("*.py"))
        if (upper := upper_imports(path.read_text()))
    }
    # then none names nurture, orchestrator or demo
    assert found == {}
