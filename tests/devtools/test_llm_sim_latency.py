"""The simulator's latency distributions: the shapes drawn (pure, seeded), the flags that choose
them, and that a slow provider answers many requests at once instead of one after another."""

from __future__ import annotations

import json
import math
import random
import statistics
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from devtools.llm_sim import LLMSim, SimConfig, SimConfigError
from devtools.llm_sim.latency import LatencyModel, latency_histogram_read, latency_model

# --- the shapes (pure) ----------------------------------------------------------------------------


def test_lognormal_draws_have_the_median_and_spread_asked_for() -> None:
    # given: a real LLM's latency, median 3 s, sigma 0.5
    model = latency_model(config=SimConfig(rpm=10, tpm=1000, latency_median_ms=3000, latency_sigma=0.5))
    rng = random.Random(7)
    # when
    draws = [model.sample_s(rng) for _ in range(20_000)]
    # then: median 3 s; log-spread 0.5; p95 = median x e^(1.645 x 0.5) = 6.83 s (written out by hand)
    assert statistics.median(draws) == pytest.approx(3.0, rel=0.03)
    assert statistics.stdev(math.log(d) for d in draws) == pytest.approx(0.5, abs=0.01)
    assert statistics.quantiles(draws, n=20)[18] == pytest.approx(6.83, rel=0.05)
    assert statistics.fmean(draws) > statistics.median(draws)  # right-skewed: a long slow tail


def test_lognormal_defaults_to_sigma_half_and_the_cap_bounds_every_draw() -> None:
    # given
    config = SimConfig(rpm=10, tpm=1000, latency_median_ms=3000, latency_max_ms=5000)
    rng = random.Random(1)
    # when
    draws = [latency_model(config=config).sample_s(rng) for _ in range(5000)]
    # then
    assert config.sigma == 0.5
    assert max(draws) == 5.0  # the tail above 5 s (about 15% of draws) is cut to the cap
    assert 0.10 < sum(d == 5.0 for d in draws) / len(draws) < 0.20


def test_same_seed_same_latencies() -> None:
    model = LatencyModel("lognormal", median_ms=3000, sigma=0.5)
    assert [model.sample_s(random.Random(3)) for _ in range(3)] == [
        model.sample_s(random.Random(3)) for _ in range(3)
    ]
    first, second = random.Random(3), random.Random(3)
    assert [model.sample_s(first) for _ in range(50)] == [model.sample_s(second) for _ in range(50)]


def test_recorded_latencies_are_drawn_with_replacement_at_their_frequencies() -> None:
    # given: 1 s recorded three times as often as 9 s
    model = latency_model(config=SimConfig(rpm=10, tpm=1000, latency_histogram=(1000, 1000, 1000, 9000)))
    rng = random.Random(5)
    # when
    counts = Counter(model.sample_s(rng) for _ in range(8000))
    # then
    assert set(counts) == {1.0, 9.0}
    assert counts[1.0] / counts[9.0] == pytest.approx(3.0, rel=0.1)


def test_uniform_latency_is_unchanged_mean_plus_minus_jitter() -> None:
    model = latency_model(config=SimConfig(rpm=10, tpm=1000, latency_ms=300, jitter_ms=100))
    rng = random.Random(2)
    draws = [model.sample_s(rng) for _ in range(2000)]
    assert min(draws) >= 0.2
    assert max(draws) <= 0.4
    assert statistics.fmean(draws) == pytest.approx(0.3, rel=0.03)
    assert latency_model(config=SimConfig(rpm=10, tpm=1000)).sample_s(rng) == 0.0


# --- recorded latencies from a file ---------------------------------------------------------------


def test_histogram_file_reads_numbers_separated_any_way_with_comments(tmp_path: Path) -> None:
    path = tmp_path / "latencies.txt"
    path.write_text("# measured on the provider, ms\n1200\n2500, 3100 ; 800\n\n4000  # slow one\n")
    assert latency_histogram_read(path=path) == (1200.0, 2500.0, 3100.0, 800.0, 4000.0)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read"),
        ("# nothing\n\n", "holds no latencies"),
        ("1200\nfast\n", "line 2: 'fast' is not a latency in ms"),
        ("1200\n-5\n", "line 2: '-5' is not a latency in ms"),
    ],
)
def test_bad_histogram_file_is_named_with_the_line(tmp_path: Path, content: str | None, message: str) -> None:
    # given
    path = tmp_path / "latencies.txt"
    if content is not None:
        path.write_text(content)
    # when
    with pytest.raises(SimConfigError) as error:
        latency_histogram_read(path=path)
    # then
    assert error.value.field == "latency_histogram"
    assert message in error.value.message


# --- flags ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "field", "message"),
    [
        ({"latency_median_ms": 0}, "latency_median_ms", "must be at least 0.001"),
        ({"latency_median_ms": 3000, "latency_sigma": -1}, "latency_sigma", "must be at least 0"),
        ({"latency_sigma": 0.5}, "latency_sigma", "needs --latency-median-ms"),
        ({"latency_median_ms": 3000, "latency_ms": 300}, "latency_median_ms", "cannot be combined"),
        ({"latency_median_ms": 3000, "jitter_ms": 10}, "latency_median_ms", "cannot be combined"),
        ({"latency_histogram": (1.0,), "latency_median_ms": 3}, "latency_histogram", "cannot be combined"),
        ({"latency_histogram": (1.0, math.nan)}, "latency_histogram", "numbers >= 0"),
        (
            {"latency_median_ms": 3000, "latency_max_ms": 100},
            "latency_max_ms",
            "at least --latency-median-ms",
        ),
        ({"latency_max_ms": -1}, "latency_max_ms", "must be at least 0.001"),
    ],
)
def test_config_rejects_bad_latency_settings_naming_them(
    settings: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(SimConfigError) as error:
        SimConfig(rpm=10, tpm=1000, **settings)
    assert error.value.field == field
    assert message in error.value.message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--latency-sigma", "0.5"], "--latency-sigma: needs --latency-median-ms"),
        (["--latency-median-ms", "3000", "--latency-ms", "300"], "--latency-median-ms: cannot be combined"),
        (
            ["--latency-median-ms", "3000", "--latency-sigma", "9"],
            "--latency-sigma: must be at least 0 and at most 5",
        ),
        (["--latency-median-ms", "3000", "--latency-max-ms", "10"], "--latency-max-ms: must be at least"),
        (["--latency-histogram", "/nonexistent/latencies.txt"], "--latency-histogram: cannot read"),
        (["--latency-median-ms", "soon"], "invalid float value: 'soon'"),
    ],
)
def test_command_rejects_bad_latency_flags_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("llm_sim", "--port", "0", *argv)


# --- the server -----------------------------------------------------------------------------------


def _post(sim: LLMSim) -> int:
    body = {"model": "sim-1", "messages": [{"role": "user", "content": "Write an intro."}], "max_tokens": 50}
    request = urllib.request.Request(f"{sim.base_url}/chat/completions", data=json.dumps(body).encode())
    request.add_header("Authorization", "Bearer k")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
        return int(response.status)


def test_two_hundred_slow_answers_overlap_instead_of_queueing() -> None:
    # given: every answer takes 8 s (sigma 0: the lognormal collapses to its median), longer than
    # 200 client threads in this one process take to connect on a loaded 2-core machine (CI saw
    # the arrivals spread over 3 s), so all 200 are held at once unless the server queues them
    sim = LLMSim(rpm=10_000, tpm=10_000_000, latency_median_ms=8000, latency_sigma=0)
    sim.start()
    try:
        # when: 200 requests at once, as a worker pool sized by Little's law sends them
        with ThreadPoolExecutor(max_workers=200) as pool:
            statuses = list(pool.map(lambda _: _post(sim), range(200)))
        stats = sim.stats()
    finally:
        sim.stop()
    # then: all 200 were in flight together (serialised: 1 at a time; a pool of 50: 50), which is
    # the claim; how long that took is the machine's business, not the sim's
    assert statuses == [200] * 200
    assert stats["peak_in_flight"] == 200
    assert stats["in_flight"] == 0
    assert stats["latency"]["drawn"] == 200
    assert stats["latency"]["mean_ms"] == pytest.approx(8000, abs=1)
    assert stats["latency"]["model"] == "lognormal median 8000 ms sigma 0"
