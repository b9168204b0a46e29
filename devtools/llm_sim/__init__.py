"""A local OpenAI-compatible chat-completions provider that enforces its limits like a real one.

`manage.py llm_sim`, the demo, the benchmarks and tests run it. It answers
`POST /v1/chat/completions` with plausible email text and refuses, with 429 + `retry-after`, any
request that would take requests/min or tokens/min past the limit. Mode "window" (default) is
a strict count over any sliding window (60 s): the request that would make the last window's
count exceed L is refused, so an over-eager client is caught at once, however the excess is
spread. Mode "bucket" is a continuously refilled token bucket (capacity L, refill L per
window), which is laxer: it admits up to 2L in some windows. Admission counts prompt tokens +
max_tokens, as OpenAI does; `usage` then reports what was really generated.

`dialect` "reasoning" refuses `max_tokens` as OpenAI's reasoning models do, "azure" answers
classic Azure OpenAI's deployments URL with an `api-key` header and `api-version` only: the
deployment dialects (config/dialects.py) are tested against them.

Imports nothing from Django, so benchmarks and tests can start it in-process. See docs/llm_sim.md.

The package: config (SimConfig, markers), limits (window and bucket), protocol (requests and
replies), content (the email text) and server (LLMSim).
"""

from devtools.llm_sim.config import (
    DIALECTS,
    MARKER_FAIL_400,
    MARKER_FAIL_429,
    MARKER_FAIL_500,
    MARKER_POLICY_FAIL,
    MARKERS,
    MODES,
    Mode,
    SimConfig,
    SimConfigError,
)
from devtools.llm_sim.limits import Limiter, format_duration
from devtools.llm_sim.server import LLMSim

__all__ = [
    "DIALECTS",
    "MARKERS",
    "MARKER_FAIL_400",
    "MARKER_FAIL_429",
    "MARKER_FAIL_500",
    "MARKER_POLICY_FAIL",
    "MODES",
    "LLMSim",
    "Limiter",
    "Mode",
    "SimConfig",
    "SimConfigError",
    "format_duration",
]
