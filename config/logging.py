"""Structured logs: one JSON object per line, `extra` fields included (outreach_id, owner_id,
tier, state, ...), so a log store can filter every line about one outreach or one owner.

Callers logging about an outreach pass `extra=outreach_log_context(outreach)` (plus their own
fields); `LOGGING` in config/settings.py comes from `logging_config()`.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Protocol

# Attributes every LogRecord has: anything else on a record came from `extra=`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class _OutreachLike(Protocol):
    pk: Any
    owner_id: Any
    tier: Any
    state: Any


def outreach_log_context(outreach: _OutreachLike) -> dict[str, Any]:
    """The fields every log line about an outreach carries: `log.info(..., extra=outreach_log_context(o))`."""
    return {
        "outreach_id": outreach.pk,
        "owner_id": outreach.owner_id,
        "tier": int(outreach.tier),
        "state": str(outreach.state),
    }


def record_extra(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """{"ts", "level", "logger", "message", ...extra, "exc"}: one line, never raises on odd values."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **record_extra(record),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


class KeyValueFormatter(logging.Formatter):
    """The same fields for a terminal: `... message outreach_id=12 owner_id=3 tier=2 state=queued`."""

    def format(self, record: logging.LogRecord) -> str:
        base = super().format(record)
        pairs = " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in record_extra(record).items())
        return f"{base} {pairs}" if pairs else base


def logging_config(*, level: str = "INFO", json_lines: bool = True) -> dict[str, Any]:
    """The LOGGING dict: JSON lines (production, log shippers) or key=value (a developer's terminal)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"()": "config.logging.JsonFormatter"},
            "kv": {
                "()": "config.logging.KeyValueFormatter",
                "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
            },
        },
        "handlers": {
            "console": {"class": "logging.StreamHandler", "formatter": "json" if json_lines else "kv"}
        },
        "root": {"handlers": ["console"], "level": level},
        # The LLM client's HTTP library (httpx2) logs every request at INFO: one line per LLM
        # call (~50 a second at 3,000 requests/min) that repeats what our own call log and
        # metrics say, and costs the generation worker CPU. Its warnings and errors still come
        # through. (httpx/openai: the same for the tests' and benches' SDK clients.)
        "loggers": {
            name: {"level": "WARNING"} for name in ("httpx2", "httpcore2", "httpx", "httpcore", "openai")
        },
    }
