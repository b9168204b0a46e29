"""Structured logs: a line about an outreach carries its id, owner, tier and state."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Iterator

import pytest

from config.logging import JsonFormatter, KeyValueFormatter, logging_config, outreach_log_context
from outreach.models import Outreach, State
from tests.factories import make_outreach


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.structured")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield logger, stream
    logger.removeHandler(handler)


@pytest.mark.django_db
def test_a_line_about_an_outreach_carries_id_owner_tier_and_state(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    outreach = make_outreach(kind=Outreach.Kind.REPLY, state=State.AWAITING_APPROVAL)
    logger.info("draft parked for review", extra={**outreach_log_context(outreach), "attempt": 2})
    line = json.loads(stream.getvalue())
    assert line["message"] == "draft parked for review"
    assert (line["outreach_id"], line["owner_id"], line["tier"], line["state"]) == (
        outreach.pk,
        outreach.owner_id,
        1,
        "awaiting_approval",
    )
    assert line["attempt"] == 2
    assert (line["level"], line["logger"]) == ("INFO", "tests.structured")


def test_json_lines_carry_exceptions_and_odd_values(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed", extra={"when": object()})
    line = json.loads(stream.getvalue())
    assert "ValueError: boom" in line["exc"]
    assert line["when"].startswith("<object")


def test_key_value_lines_for_a_terminal() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "sent", None, None)
    record.outreach_id, record.state = 7, "sent"
    text = KeyValueFormatter("%(levelname)s %(message)s").format(record)
    assert text == 'INFO sent outreach_id=7 state="sent"'


def test_logging_config_is_a_valid_dict_config() -> None:
    root = logging.getLogger()
    saved = (root.level, root.handlers[:])
    try:
        logging.config.dictConfig(logging_config(level="WARNING", json_lines=True))
        assert root.level == logging.WARNING
        assert isinstance(root.handlers[-1].formatter, JsonFormatter)
    finally:  # leave the root logger as pytest set it up (caplog hangs off it)
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]
