"""bench.stack: what a failed smoke run leaves a reader of CI's output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import stack


def test_a_failed_smoke_run_prints_the_tail_of_each_log_it_wrote_and_no_older_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # given a smoke run whose orchestrator logged 100 lines, beside a log of an earlier run
    monkeypatch.setattr(stack, "OUT", tmp_path)
    monkeypatch.setattr(stack, "_logs_printed", False)
    monkeypatch.setenv(stack.SUFFIX, "_smoke_1")
    logs = tmp_path / "smoke" / "product-logs"
    logs.mkdir(parents=True)
    (logs / "worker-orchestrator.log").write_text("".join(f"cycle {i}\n" for i in range(100)))
    earlier = logs / "worker-send.log"
    earlier.write_text("from an earlier run\n")
    os.utime(earlier, (0, 0))
    # when the run fails
    with pytest.raises(SystemExit) as exit_:
        stack.smoke_verdict(problems=["no email arrived"])
    # then it exits 1 and stderr holds the last lines of this run's log, once
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert f"--- {logs / 'worker-orchestrator.log'}: last {stack.LOG_TAIL_LINES} of 100 lines" in err
    assert f"cycle {100 - stack.LOG_TAIL_LINES}\n" in err
    assert "cycle 99" in err
    assert f"cycle {99 - stack.LOG_TAIL_LINES}\n" not in err
    assert "earlier run" not in err
    stack.smoke_logs_print()
    assert capsys.readouterr().err == ""


def test_a_smoke_run_logs_its_stack_at_info_and_a_full_run_at_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(stack.SUFFIX, "_smoke_1")
    assert stack.stack_log_level() == "INFO"
    monkeypatch.delenv(stack.SUFFIX)
    assert stack.stack_log_level() == "WARNING"
