"""Every bench's smoke mode runs and passes, so a change that breaks a bench fails CI.

bench/dispatch.py rotted unseen when columns were added: nothing ran it. Each bench's
`--smoke` runs its own code path (the same processes and queries as the full run) at a tiny
size on stores of its own (bench.stack.smoke_stores: databases with a per-process suffix,
dropped at the end, and a private redis-server), so it can run beside this suite. It exits 1
when the run is broken; these tests run it as a file, as a person would, with this venv's
python, and read its figures where that is cheap.

Not benches, so no smoke mode: bench/stack.py (the shared set-up) and bench/naive_app.py (the
plain-Celery app compare.py starts).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = [
    "assign_leads",
    "budget",
    "compare",
    "dispatch",
    "fairness",
    "latency",
    "llm_concurrency",
    "mailboxes",
    "models",
    "review_drafts",
    "send_burst",
    "soak",
    "tokens_binding",
]
# A stack bench waits up to 90 s for its workers to boot on a loaded machine, then runs seconds.
TIMEOUT_S = 280

pytestmark = pytest.mark.slow


def smoke(bench: str) -> str:
    """Run `bench/<bench>.py --smoke`; its output, once it exited 0."""
    # A developer's BENCH_DATABASE_URL / BENCH_REDIS_URL point a full run at their own stores;
    # smoke_stores ignores them, and the test does not pass them on either.
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_DATABASE_URL", "BENCH_REDIS_URL")}
    done = subprocess.run(
        [sys.executable, f"bench/{bench}.py", "--smoke"],
        cwd=ROOT,
        env={**env, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    # stderr: the tails of the process logs a failed run prints (bench.stack.smoke_logs_print)
    assert done.returncode == 0, (
        f"{bench} --smoke exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-20000:]}"
    )
    assert done.stdout.rstrip().endswith("smoke: OK"), done.stdout[-3000:]
    return done.stdout


def test_every_bench_has_a_smoke_test() -> None:
    # a new bench without one would rot as dispatch.py did
    helpers = {"__init__", "stack", "naive_app"}
    assert sorted(p.stem for p in (ROOT / "bench").glob("*.py") if p.stem not in helpers) == BENCHES


def test_dispatch_smoke_dispatches_a_full_batch_every_cycle_at_two_depths() -> None:
    out = smoke("dispatch")
    rows = re.findall(r"^\s+([\d,]+)\s+([\d.]+)\s+([\d.]+)\s+([\d,]+)\s", out, re.MULTILINE)
    assert [depth for depth, *_ in rows] == ["200", "2,000"]
    assert all(float(p50) > 0 for _, p50, _, _ in rows)
    # its owners in two organizations (--organizations), each with its controls, and still a
    # full batch every cycle (the smoke's verdict)
    assert "the owners dealt round 2 organizations" in out
    # and the comparison (--pairs): one pair, its two sizes in two processes in
    # lockstep, its ratio and its cycle-by-cycle ratios' median, the medians
    assert "in lockstep" in out
    (small, large, pair_ratio, by_cycle) = re.findall(
        r"^pair 1: ([\d.]+) ms and ([\d.]+) ms, ([\d.]+)x; cycle by cycle ([\d.]+)x", out, re.MULTILINE
    )[0]
    assert min(float(small), float(large), float(by_cycle)) > 0
    assert f"median of the pairs' ratios {pair_ratio}x" in out


def test_soak_smoke_loses_nothing_and_sends_nothing_twice() -> None:
    out = smoke("soak")
    assert "result: PASS" in out
    assert re.search(r"duplicates \(sent twice\)\s+0 \(SENT received twice: 0; SENT not received: 0", out)


def test_send_burst_smoke_holds_the_caps_and_the_rate() -> None:
    out = smoke("send_burst")
    figures = json.loads(out[out.index("{") : out.rindex("}") + 1])
    assert figures["arrivals"] > 0
    assert figures["duplicates"] == 0
    assert figures["owners_over_limit"] == figures["domains_over_cap"] == {}
    assert figures["most_in_1s"] <= figures["configured_per_s"]


def test_mailboxes_smoke_holds_each_mailbox_s_cap_and_spacing() -> None:
    out = smoke("mailboxes")
    rows = re.findall(r"^(seller\d@m\d\.example)\s+(\d+)\s+(\d+)\s+(\d+)\s", out, re.MULTILINE)
    assert len(rows) == 10
    assert {day for _, day, _, _ in rows} == {"1", "10"}
    assert all(int(sent) <= int(cap) for _, _, sent, cap in rows)


def test_compare_smoke_completes_work_in_both_arms() -> None:
    out = smoke("compare")
    jain = re.search(r"fairness across owners \(Jain\)\s+([\d.]+)\s+([\d.]+)", out)
    assert jain is not None, out[-2000:]
    assert all(0 < float(value) <= 1 for value in jain.groups())


def test_latency_smoke_sends_with_no_duplicates() -> None:
    out = smoke("latency")
    assert re.search(r"duplicates at the sink\s+0 \(SENT not received: 0\)", out)


def test_tokens_binding_smoke_gets_no_call_answered_429() -> None:
    # a key binding on tokens, long replies among intros, the Procfile's workers and llm_sim
    # enforcing the limit: the budget (bursts holding the costliest learned job) lets no call
    # through that the provider refuses
    out = smoke("tokens_binding")
    assert re.search(r"answered 429\s+0 of \d+ requests", out), out[-2000:]


@pytest.mark.parametrize("bench", ["assign_leads", "budget", "fairness", "llm_concurrency", "models"])
def test_bench_smoke_passes(bench: str) -> None:
    smoke(bench)


def test_review_drafts_smoke_keeps_the_sellers_drafts_within_its_limit() -> None:
    out = smoke("review_drafts")
    found = re.search(r"max committed drafts (\d+) \(target <= (\d+)\)", out)
    assert found is not None, out
    assert int(found[1]) <= int(found[2])
