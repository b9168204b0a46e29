"""outreach.idempotency: the documented key formats, written out by hand, and their one builder."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from outreach.idempotency import KEY_MAX_CHARS, intro_key, nudge_key, reply_key
from outreach.models import Outreach

ROOT = Path(__file__).resolve().parents[2]


def test_keys_have_the_formats_the_readme_documents() -> None:
    # given / when / then: `intro:<lead id>`, `nudge:<lead id>:<step>`, `reply:<message_id>`
    assert intro_key(lead_id=42) == "intro:42"
    assert nudge_key(lead_id=42, step=2) == "nudge:42:2"
    assert reply_key(message_id="<abc@mail.acme.example>") == "reply:<abc@mail.acme.example>"


def test_a_message_id_too_long_for_the_column_is_keyed_by_its_sha256() -> None:
    # given a Message-ID that would make a key one character over the column's size
    message_id = "m" * (KEY_MAX_CHARS - len("reply:") + 1)
    # when it is keyed
    key = reply_key(message_id=message_id)
    # then the key is its hash, which fits, and the longest id that fits is kept as it is
    assert key == "reply:sha256:" + hashlib.sha256(message_id.encode()).hexdigest()
    assert len(key) <= KEY_MAX_CHARS
    assert reply_key(message_id=message_id[:-1]) == "reply:" + message_id[:-1]


def test_key_size_is_the_columns_size() -> None:
    assert Outreach._meta.get_field("idempotency_key").max_length == KEY_MAX_CHARS


@pytest.mark.parametrize("prefix", ["intro:", "nudge:", "reply:"])
def test_no_other_module_spells_a_key_prefix(prefix: str) -> None:
    # given every Python module of the product, benches and tools (tests may state expectations)
    sources = [
        path
        for folder in ("outreach", "nurture", "orchestrator", "demo", "bench", "devtools", "config")
        for path in (ROOT / folder).rglob("*.py")
        if path.name != "idempotency.py" and "migrations" not in path.parts
    ]
    # when their string literals are read
    spelled = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sources
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(prefix)
    ]
    # then none starts with a key prefix: keys are built by outreach.idempotency only
    assert spelled == []
