"""ProcessGroup.stop ends every process of a line, not only the shell that started it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from devtools.processes import ProcessGroup

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc (Linux)")

# A worker slow to stop: the shell's child ignores SIGTERM (as a worker finishing its jobs)
SLOW = f"{sys.executable} -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)'"


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_stop_ends_a_child_that_outlives_its_shell(tmp_path: Path) -> None:
    # given a line whose shell runs a child that does not stop on SIGTERM
    group = ProcessGroup(log_dir=tmp_path)
    shell = group.start("slow", ["sh", "-c", f"{SLOW} & wait"])
    log = tmp_path / "slow.log"
    deadline = time.monotonic() + 10
    while not log.read_text() and time.monotonic() < deadline:  # the child is up
        time.sleep(0.05)
    children = [
        int(p.parent.name)
        for p in Path("/proc").glob("[0-9]*/stat")
        if p.parent.name != str(shell.pid)
        and (fields := p.read_text().rpartition(")")[2].split())
        and fields[2] == str(shell.pid)
    ]
    assert children, "the slow child is running"
    # when the group is stopped (a short timeout: the child never stops on SIGTERM)
    started = time.monotonic()
    group.stop(timeout=1.0)
    # then the child is gone too, killed after the timeout
    assert not any(_running(pid) for pid in children)
    assert time.monotonic() - started < 8
