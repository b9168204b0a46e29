"""How long the model "thinks" before it answers: the latency distributions the simulator draws from.

Three shapes, one per way of describing a provider:
- uniform: a mean +- jitter (the original `--latency-ms`/`--jitter-ms`; 0 = answer at once);
- lognormal: a median and the sigma of the underlying normal, optionally capped. Real LLM
  latencies are right-skewed (most answers near the median, a long tail of slow ones), which a
  uniform spread cannot show, and the tail is what decides how much work must be in flight;
- recorded: latencies measured on a real provider, drawn with replacement (the empirical
  distribution, tail included).

Pure: `sample_s` takes the random generator, so a seeded simulator repeats its latencies.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from devtools.llm_sim.config import SimConfig, SimConfigError

Kind = Literal["uniform", "lognormal", "recorded"]
_SEPARATORS = re.compile(r"[\s,;]+")


@dataclass(frozen=True)
class LatencyModel:
    kind: Kind
    mean_ms: float = 0.0  # uniform
    jitter_ms: float = 0.0  # uniform
    median_ms: float = 0.0  # lognormal
    sigma: float = 0.0  # lognormal
    recorded_ms: tuple[float, ...] = ()  # recorded
    max_ms: float | None = None  # any shape: no answer takes longer (a client timeout, a provider cap)

    def sample_s(self, rng: random.Random) -> float:
        return min(self._sample_ms(rng), math.inf if self.max_ms is None else self.max_ms) / 1000

    def describe(self) -> str:
        cap = "" if self.max_ms is None else f", at most {self.max_ms:g} ms"
        if self.kind == "lognormal":
            return f"lognormal median {self.median_ms:g} ms sigma {self.sigma:g}{cap}"
        if self.kind == "recorded":
            return f"{len(self.recorded_ms)} recorded latencies{cap}"
        return f"{self.mean_ms:g}+-{self.jitter_ms:g} ms{cap}"

    def _sample_ms(self, rng: random.Random) -> float:
        if self.kind == "lognormal":
            # lognormvariate(mu, sigma) = exp(N(mu, sigma)); its median is exp(mu).
            return rng.lognormvariate(math.log(self.median_ms), self.sigma)
        if self.kind == "recorded":
            return rng.choice(self.recorded_ms)
        if not (self.mean_ms or self.jitter_ms):
            return 0.0  # no draw: a zero-latency simulator's failure draws stay what they were
        return max(rng.uniform(self.mean_ms - self.jitter_ms, self.mean_ms + self.jitter_ms), 0.0)


def latency_model(*, config: SimConfig) -> LatencyModel:
    """The distribution a (validated) SimConfig describes."""
    cap = config.latency_max_ms
    if config.latency_median_ms is not None:
        return LatencyModel("lognormal", median_ms=config.latency_median_ms, sigma=config.sigma, max_ms=cap)
    if config.latency_histogram:
        return LatencyModel("recorded", recorded_ms=config.latency_histogram, max_ms=cap)
    return LatencyModel("uniform", mean_ms=config.latency_ms, jitter_ms=config.jitter, max_ms=cap)


def latency_histogram_read(*, path: Path) -> tuple[float, ...]:
    """Recorded latencies in milliseconds from a text file: numbers separated by newlines, spaces,
    commas or semicolons; `#` starts a comment. SimConfigError names the setting and the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SimConfigError("latency_histogram", f"cannot read {path}: {exc}") from None
    values: list[float] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for word in _SEPARATORS.split(line.partition("#")[0].strip()):
            if word:
                values.append(_milliseconds(word, path=path, line=number))
    if not values:
        raise SimConfigError("latency_histogram", f"{path} holds no latencies (one number of ms per line)")
    return tuple(values)


def _milliseconds(word: str, *, path: Path, line: int) -> float:
    try:
        value = float(word)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise SimConfigError(
            "latency_histogram", f"{path} line {line}: {word!r} is not a latency in ms (a number >= 0)"
        )
    return value
