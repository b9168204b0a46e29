"""python manage.py llm_sim --port P --rpm N --tpm N [--latency-ms N | --latency-median-ms M
[--latency-sigma S] | --latency-histogram FILE] [--latency-max-ms N] [--fail-rate F] [...]

Runs devtools.llm_sim in the foreground until SIGINT or SIGTERM (then exits 0). Defaults come
from LLM_RPM / LLM_TPM and the port of LLM_BASE_URL, so a bare `llm_sim` matches the settings.
"""

from __future__ import annotations

import dataclasses
import errno
import signal
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.llm_sim import MODES, LLMSim, SimConfig, SimConfigError
from devtools.llm_sim.config import DEFAULT_SIGMA, DIALECTS, model_spec_parse
from devtools.llm_sim.latency import latency_histogram_read

# How soon after SIGINT or SIGTERM the command stops serving.
STOP_POLL_S = 0.05


class Command(BaseCommand):
    help = "Run a local OpenAI-compatible provider that enforces requests/min and tokens/min like a real one."
    requires_system_checks: list[str] = []  # starts in a blink and never touches the database

    def add_arguments(self, parser: CommandParser) -> None:
        default_port = urlsplit(settings.LLM_BASE_URL).port or 8900
        parser.add_argument("--host", default="127.0.0.1", help="Interface to bind (default 127.0.0.1).")
        parser.add_argument("--port", type=int, default=default_port, help="0 = any free port.")
        parser.add_argument(
            "--rpm", type=int, default=settings.LLM_RPM, help="Requests per minute (LLM_RPM)."
        )
        parser.add_argument("--tpm", type=int, default=settings.LLM_TPM, help="Tokens per minute (LLM_TPM).")
        parser.add_argument("--latency-ms", type=float, default=0.0, help="Mean answer latency.")
        parser.add_argument(
            "--jitter-ms", type=float, default=None, help="Latency spread +-; default half the mean."
        )
        parser.add_argument(
            "--latency-median-ms",
            type=float,
            default=None,
            help="Lognormal latency instead: its median (real LLMs: a few seconds).",
        )
        parser.add_argument(
            "--latency-sigma",
            type=float,
            default=None,
            help=f"Sigma of the lognormal's underlying normal (default {DEFAULT_SIGMA}).",
        )
        parser.add_argument(
            "--latency-histogram",
            type=Path,
            default=None,
            help="Recorded latencies instead: a file of ms values (one per line), drawn at random.",
        )
        parser.add_argument("--latency-max-ms", type=float, default=None, help="Cap on any latency drawn.")
        parser.add_argument(
            "--fail-rate", type=float, default=0.0, help="Share of admitted calls answered 5xx (0-1)."
        )
        parser.add_argument(
            "--mode", choices=MODES, default="window", help="Strict sliding window or token bucket."
        )
        parser.add_argument("--window-s", type=float, default=60.0, help="Window length (providers: 60).")
        parser.add_argument(
            "--shared-rps", type=float, default=0.0, help="Another client on the key, requests/s."
        )
        parser.add_argument(
            "--shared-tokens", type=int, default=300, help="Tokens per shared-client request."
        )
        parser.add_argument(
            "--model",
            dest="models",
            action="append",
            default=[],
            metavar="NAME:RPM:TPM",
            help="Serve this model with limits of its own (repeat for several); others answer 404.",
        )
        parser.add_argument(
            "--dialect",
            choices=DIALECTS,
            default="openai",
            help="Request dialect: openai; reasoning (refuses max_tokens, takes max_completion_tokens); "
            "azure (/openai/deployments/<name>/chat/completions, api-key header, api-version).",
        )
        parser.add_argument(
            "--seed", type=int, default=0, help="Seed for latency and failure draws (a run repeats)."
        )
        parser.add_argument(
            "--log-every", type=float, default=10.0, help="Seconds between status lines; 0 = off."
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        sim = LLMSim(config=_config(opts))
        # Before it serves: once /health answers, a SIGTERM stops it cleanly (installed after
        # the start, a signal in between killed the process with the default action: -15).
        # The handler only notes the signal, taking no lock: it runs in the main thread
        # wherever the signal lands, and one that set a threading.Event there deadlocked when
        # it landed while the main thread's Event.wait held the Event's own lock (a start
        # stopped at once never exited: one CI run, 2026-12-06).
        stop: list[int] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda signum, _frame: stop.append(signum))
        try:
            sim.start()
        except OSError as exc:
            raise CommandError(_bind_error(exc, host=opts["host"], port=opts["port"])) from None
        c = sim.config
        self._say(
            f"llm_sim listening on {sim.base_url} ({c.mode}: {c.rpm} requests and {c.tpm} tokens per "
            f"{c.window_s:g} s; latency {sim.latency.describe()}; fail rate {c.fail_rate:g}; "
            f"shared client {c.shared_rps:g}/s; dialect {c.dialect}). Stats: http://{c.host}:{sim.port}/stats. Ctrl-C stops."
        )
        try:
            self._wait(sim, stop, opts["log_every"])
        finally:
            sim.stop()
        self._say("llm_sim stopped.")

    def _wait(self, sim: LLMSim, stop: list[int], every: float) -> None:
        """Until a signal is noted in `stop`, a status line every `every` seconds (0: none)."""
        next_line = time.monotonic() + every
        while not stop:
            time.sleep(STOP_POLL_S)
            if every <= 0 or time.monotonic() < next_line:
                continue
            next_line += every
            s, c = sim.stats(), sim.config
            window, peak = s["window"], s["peak_window"]
            self._say(
                f"window {window['requests']}/{c.rpm} req {window['tokens']}/{c.tpm} tok; "
                f"peak {peak['requests']} req {peak['tokens']} tok; admitted {s['admitted']}, "
                f"429s {s['rejected_429']}, 5xx {s['injected_5xx']}, shared {s['shared']['admitted']}"
            )

    def _say(self, line: str) -> None:
        self.stdout.write(line)
        self.stdout.flush()  # a pipe (the demo's log file, a test) should see it now


def _config(opts: dict[str, Any]) -> SimConfig:
    try:
        settings = {f.name: opts[f.name] for f in dataclasses.fields(SimConfig)}
        path = settings.pop("latency_histogram")
        recorded = () if path is None else latency_histogram_read(path=path)
        settings["models"] = tuple(model_spec_parse(text) for text in settings["models"])
        return SimConfig(**settings, latency_histogram=recorded)
    except SimConfigError as exc:
        flag = "--" + exc.field.replace("_", "-")
        raise CommandError(f"{flag}: {exc.message}.") from None


def _bind_error(exc: OSError, *, host: str, port: int) -> str:
    """Name the flag at fault: an address this machine does not have is --host's, the rest --port's."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return f"--host {host}: not an address of this machine ({reason}); use 127.0.0.1 or 0.0.0.0."
    return f"--port {port}: cannot listen on {host}: {reason}; pick a free port, or 0 for any."
