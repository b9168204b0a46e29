"""The simulator's settings (SimConfig), checked with messages that name the flag, and its test markers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Mode = Literal["window", "bucket"]
MODES: tuple[Mode, ...] = ("window", "bucket")
# The provider's request dialect: "openai" takes max_tokens or max_completion_tokens with a
# bearer key on /v1/chat/completions; "reasoning" is an OpenAI reasoning model, refusing
# max_tokens with OpenAI's 400 unsupported_parameter; "azure" is classic Azure OpenAI:
# /openai/deployments/<name>/chat/completions with an `api-key` header and `api-version`.
Dialect = Literal["openai", "reasoning", "azure"]
DIALECTS: tuple[Dialect, ...] = ("openai", "reasoning", "azure")

# Test hooks: put one in the last user message (a lead's name will do: prompts quote lead data there).
MARKER_POLICY_FAIL = "SIM:POLICY_FAIL"  # 200 with an unfilled {{first_name}}: the policy check must reject it
MARKER_FAIL_500 = "SIM:FAIL_500"  # admitted (counts against the window), then 500
MARKER_FAIL_400 = "SIM:FAIL_400"  # admitted, then 400 invalid_request_error
MARKER_FAIL_429 = "SIM:FAIL_429"  # refused with 429 + retry-after 1 s whatever the window holds
MARKERS = (MARKER_POLICY_FAIL, MARKER_FAIL_500, MARKER_FAIL_400, MARKER_FAIL_429)

CHARS_PER_TOKEN = 4  # the usual rule of thumb; counts are estimates either way
DEFAULT_MAX_TOKENS = 512  # counted for admission when a request names no max_tokens
MAX_BODY_BYTES = 4 * 1024 * 1024
INJECTED_STATUSES = (500, 502, 503)
DEFAULT_SIGMA = 0.5  # with --latency-median-ms alone: p95 = median x e^(1.645 x 0.5) = 2.3 x median


class SimConfigError(ValueError):
    """A bad setting; `field` names it so the command can name the flag."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass(frozen=True)
class SimConfig:
    rpm: int
    tpm: int
    latency_ms: float = 0.0
    jitter_ms: float | None = None  # None = half the latency: uniform in mean +- jitter
    # A lognormal latency instead (real LLMs: right-skewed, a long tail): the median and the
    # sigma of the underlying normal (None = 0.5 with a median). Excludes latency_ms/jitter_ms.
    latency_median_ms: float | None = None
    latency_sigma: float | None = None
    latency_max_ms: float | None = None  # a cap on any shape (a provider's own timeout)
    latency_histogram: tuple[float, ...] = ()  # recorded latencies (ms), drawn with replacement
    fail_rate: float = 0.0
    mode: Mode = "window"
    window_s: float = 60.0  # tests shrink it; providers use 60
    shared_rps: float = 0.0  # another client on the same key, this many requests/s
    shared_tokens: int = 300  # tokens each of its requests counts
    seed: int = 0
    # Several models, each with limits of its own: (name, rpm, tpm). Empty: one limit (rpm, tpm)
    # for any model named. Given: a model not listed answers 404 model_not_found, as providers do.
    models: tuple[tuple[str, int, int], ...] = ()
    dialect: Dialect = "openai"
    host: str = "127.0.0.1"
    port: int = 0  # 0 = any free port

    def __post_init__(self) -> None:
        problems = [
            ("rpm", _whole(self.rpm, low=1)),
            ("tpm", _whole(self.tpm, low=1)),
            ("latency_ms", _number(self.latency_ms, low=0)),
            ("jitter_ms", None if self.jitter_ms is None else _number(self.jitter_ms, low=0)),
            ("fail_rate", _number(self.fail_rate, low=0, high=1)),
            ("mode", None if self.mode in MODES else f"must be one of {', '.join(MODES)}"),
            ("dialect", None if self.dialect in DIALECTS else f"must be one of {', '.join(DIALECTS)}"),
            ("window_s", _number(self.window_s, low=0.001)),
            ("shared_rps", _number(self.shared_rps, low=0, high=10_000)),
            ("shared_tokens", _whole(self.shared_tokens, low=0, high=self.tpm)),
            ("port", _whole(self.port, low=0, high=65535)),
        ]
        problems.append(("models", _models_problem(self.models)))
        for name, problem in problems + self._latency_problems():
            if problem:
                raise SimConfigError(name, problem)

    @property
    def jitter(self) -> float:
        return self.latency_ms / 2 if self.jitter_ms is None else self.jitter_ms

    @property
    def sigma(self) -> float:
        return DEFAULT_SIGMA if self.latency_sigma is None else self.latency_sigma

    def _latency_problems(self) -> list[tuple[str, str | None]]:
        """One latency shape at a time: a second one given would otherwise be silently ignored."""
        median, sigma, cap, histogram = (
            self.latency_median_ms,
            self.latency_sigma,
            self.latency_max_ms,
            self.latency_histogram,
        )
        numbers = [
            ("latency_median_ms", None if median is None else _number(median, low=0.001)),
            ("latency_sigma", None if sigma is None else _number(sigma, low=0, high=5)),
            ("latency_max_ms", None if cap is None else _number(cap, low=0.001)),
            (
                "latency_histogram",
                next(
                    (
                        f"must hold latencies in ms (numbers >= 0), got {v!r}"
                        for v in histogram
                        if _number(v, low=0)
                    ),
                    None,
                ),
            ),
        ]
        if any(problem for _, problem in numbers):
            return numbers
        uniform = self.latency_ms != 0 or self.jitter_ms is not None
        combos = [
            ("latency_sigma", "needs --latency-median-ms (it is the lognormal's spread)"),
            ("latency_median_ms", "cannot be combined with --latency-ms/--jitter-ms (a uniform latency)"),
            ("latency_histogram", "cannot be combined with --latency-ms/--jitter-ms/--latency-median-ms"),
            ("latency_max_ms", f"must be at least --latency-median-ms ({median}), got {cap}"),
        ]
        wrong = [
            sigma is not None and median is None,
            median is not None and uniform,
            bool(histogram) and (uniform or median is not None),
            median is not None and cap is not None and cap < median,
        ]
        return [(name, message if bad else None) for (name, message), bad in zip(combos, wrong, strict=True)]


def _whole(value: object, *, low: int, high: int | None = None) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"must be a whole number, got {value!r}"
    return _number(value, low=low, high=high)


def _number(value: object, *, low: float, high: float | None = None) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if value < low or (high is not None and value > high):
        return (
            f"must be at least {low}"
            + (f" and at most {high}" if high is not None else "")
            + f", got {value}"
        )
    return None


def model_spec_parse(text: str) -> tuple[str, int, int]:
    """`NAME:RPM:TPM` (the --model flag) -> (name, rpm, tpm)."""
    name, _, limits = text.rpartition(":")
    name, _, rpm = name.rpartition(":")
    try:
        return name, int(rpm), int(limits)
    except ValueError:
        raise SimConfigError(
            "models", f"expected NAME:RPM:TPM (e.g. small:600:600000), got {text!r}"
        ) from None


def _models_problem(models: tuple[tuple[str, int, int], ...]) -> str | None:
    names = [name for name, _, _ in models]
    if len(set(names)) != len(names):
        return f"each model once, got {', '.join(names)}"
    for name, rpm, tpm in models:
        problem = ("a name" if not name else None) or _whole(rpm, low=1) or _whole(tpm, low=1)
        if problem:
            return f"model {name!r}: {problem}"
    return None
