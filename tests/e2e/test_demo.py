"""The README's main job, run as a user would: `manage.py demo --for SECONDS`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from devtools.processes import ROOT
from devtools.smtp_sink import free_port

pytestmark = pytest.mark.slow


def test_demo_runs_for_seconds_writes_a_report_and_stops_everything(tmp_path: Path) -> None:
    # given free ports and a scratch database, broker and report folder
    ports = {name: free_port() for name in ("web", "flower", "sim", "smtp")}
    redis.Redis.from_url("redis://127.0.0.1:6379/6").flushdb()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "DATABASE"))},
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
        "REDIS_URL": "redis://127.0.0.1:6379/6",
    }
    # when the demo runs for 30 seconds
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "demo",
            "--for",
            "30",
            "--leads",
            "60",
            "--auto-approve-after",
            "3",
            "--web-port",
            str(ports["web"]),
            "--flower-port",
            str(ports["flower"]),
            "--sim-port",
            str(ports["sim"]),
            "--smtp-port",
            str(ports["smtp"]),
            "--report-dir",
            str(tmp_path / "report"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # then it stopped cleanly, wrote the report, and real email went out through the pipeline
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Demo stopped." in result.stdout
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    figures = report["figures"]
    assert figures["states"]["sent"] > 0
    assert figures["llm"]["rejected_429"] == 0
    for chart in ("llm_requests_per_min.svg", "share_per_owner.svg", "latency_per_tier.svg"):
        assert (tmp_path / "report" / chart).stat().st_size > 1000
    # and every process it started is gone: its ports are free again
    for name, port in ports.items():
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"{name} still listening on {port}"
