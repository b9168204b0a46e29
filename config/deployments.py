"""LLM deployments, step models and fallbacks: the env contract (docs/architecture.md), parsed once.

  LLM_DEPLOYMENTS   JSON list, or `@path` to a JSON or YAML file, of
                    {"name", "model", "rpm", "tpm"[, "base_url", "api_key"]} and the provider's
                    dialect (config/dialects.py: "dialect" preset openai_compatible, openai or
                    azure; "token_param", "auth", "path", "extra_headers", "extra_query",
                    "extra_body"); deployments sharing a name are a pool (the dispatcher places
                    each job on the one with most room).
  LLM_STEP_MODELS   triage=<name>,plan=<name>,context=<name>,message=<name>; a step not named uses
                    the first name (triage: a reply's classification call, nurture.writing.triage).
  LLM_FALLBACKS     <name>=<name>,...: a name whose deployments are all failing (breaker open) or
                    out of room for LLM_FALLBACK_AFTER_S runs its steps on the fallback.
Absent LLM_DEPLOYMENTS, the product has one deployment built from LLM_MODEL / LLM_RPM / LLM_TPM /
LLM_BASE_URL / LLM_API_KEY *when asked* (`deployments()`), whose budget scope is the historical
"provider": exactly the single-model behaviour, and tests that change those settings still work.

Parsing is pure (`deployments_parse`, `step_models_parse`, `fallbacks_parse`): every error names
the variable, the entry and what to do, as ImproperlyConfigured at start-up.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml
from django.core.exceptions import ImproperlyConfigured

from config import dialects
from config.dialects import Dialect

# The generation's calls, in order; "triage" is made by replies only (the one classification call
# of a reply its rules did not settle), so an intro's or a nudge's job draws on the other three.
STEPS: Final = ("triage", "plan", "context", "message")
REPLY_ONLY_STEPS: Final = ("triage",)


def job_steps(*, reply: bool) -> tuple[str, ...]:
    """The steps a job of this kind calls: every step for a reply, the writing ones otherwise."""
    return STEPS if reply else tuple(step for step in STEPS if step not in REPLY_ONLY_STEPS)


NAME_RE: Final = re.compile(r"^[A-Za-z0-9_.\-]{1,40}$")  # part of a budget scope: no ':', '@', ','
PROVIDER_SCOPE: Final = "provider"  # the implicit deployment's scope (orchestrator.budget.PROVIDER)
_FIELDS: Final = ("name", "model", "rpm", "tpm", "base_url", "api_key", *dialects.FIELDS)
_FIELD_LIKE: Final = re.compile(r"^[a-z_]{1,20}$")


@dataclass(frozen=True, slots=True)
class Deployment:
    """One model endpoint with its own limits. `index` is its place in its pool (name): the
    label `name#index` names it in logs, blocked reasons and dashboards. `base_url`/`api_key`
    None mean LLM_BASE_URL/LLM_API_KEY, read when the client is built; `dialect` is how its
    provider wants the request (config.dialects). The key is never in repr."""

    name: str
    model: str
    rpm: int
    tpm: int
    index: int = 0
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    dialect: Dialect = dialects.DEFAULT
    implicit: bool = False  # built from LLM_MODEL/LLM_RPM/LLM_TPM: the "provider" scope

    @property
    def label(self) -> str:
        return f"{self.name}#{self.index}"

    @property
    def scope(self) -> str:
        """Its budget scope: buckets, pacer log and adaptation of its own."""
        return PROVIDER_SCOPE if self.implicit else f"dep:{self.name}:{self.index}"


def deployments_parse(raw: str, *, variable: str = "LLM_DEPLOYMENTS") -> tuple[Deployment, ...]:
    """The deployments of `raw` (JSON text, or `@path` to a JSON/YAML file), in order."""
    data = _load(raw, variable=variable)
    if not isinstance(data, list) or not data:
        raise ImproperlyConfigured(
            f"{variable}: expected a non-empty list of deployments "
            '[{"name": ..., "model": ..., "rpm": ..., "tpm": ...}], got ' + type(data).__name__
        )
    pools: dict[str, int] = {}
    found: list[Deployment] = []
    for position, entry in enumerate(data, start=1):
        deployment = _deployment(entry, where=f"{variable} entry {position}", pools=pools)
        pools[deployment.name] = pools.get(deployment.name, 0) + 1
        found.append(deployment)
    return tuple(found)


def step_models_parse(raw: str, *, names: Sequence[str], variable: str = "LLM_STEP_MODELS") -> dict[str, str]:
    """Every step -> the deployment name it uses; steps not named use the first name."""
    chosen = _pairs(raw, variable=variable, left_ok=STEPS, left_what="step", names=names)
    return {step: chosen.get(step, names[0]) for step in STEPS}


def fallbacks_parse(raw: str, *, names: Sequence[str], variable: str = "LLM_FALLBACKS") -> dict[str, str]:
    """Name -> the name its steps run on while it cannot (one level: a fallback's fallback is
    not followed, so a loop cannot form)."""
    found = _pairs(raw, variable=variable, left_ok=names, left_what="deployment name", names=names)
    for name, fallback in found.items():
        if name == fallback:
            raise ImproperlyConfigured(f"{variable}: {name}={fallback}: a name cannot be its own fallback.")
    return found


def _load(raw: str, *, variable: str) -> Any:
    text, source = raw, "its value"
    if raw.startswith("@"):
        path = Path(raw[1:])
        try:
            text = path.read_text()
        except OSError as exc:
            raise ImproperlyConfigured(f"{variable}={raw}: cannot read {path}: {exc.strerror}.") from None
        source = str(path)
        if path.suffix in (".yaml", ".yml"):
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ImproperlyConfigured(
                    f"{variable}: {source} is not valid YAML{_yaml_where(exc)}"
                ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(
            f"{variable}: {source} is not valid JSON ({exc.msg} at line {exc.lineno} column "
            f"{exc.colno}); give a JSON list, or @path to a .json/.yaml file."
        ) from None


# A quoted value in a YAML parser's problem text, unless it names a token ('<stream end>') or is
# a character or two ('\t', ','): anything longer may be a piece of the file, a key included.
_QUOTED = re.compile(r"'(?!<)[^']{3,}'")


def _yaml_where(exc: yaml.YAMLError) -> str:
    """Where the YAML broke and what the parser expected, never the line itself: PyYAML's own
    message quotes the offending line, and in this file that can be an `api_key` line."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return " (check its quoting and indentation)."
    problem = _QUOTED.sub("'...'", str(getattr(exc, "problem", None) or "a syntax error"))
    return (
        f" at line {mark.line + 1}, column {mark.column + 1}: {problem}. The line is not shown (it may"
        " hold a key): indent with spaces, not tabs, and quote a value that holds ': ' or ' #' or"
        " starts with a quote, [, {, *, &, ! or %, closing every quote you open."
    )


def _deployment(entry: object, *, where: str, pools: Mapping[str, int]) -> Deployment:
    if not isinstance(entry, dict):
        # Its type, not its text: a line that failed to become a mapping may hold a key.
        raise ImproperlyConfigured(
            f"{where}: expected an object with name, model, rpm, tpm, got a {type(entry).__name__}."
        )
    # An unknown field is named only when it looks like one: a malformed line can make a key
    # the field's name (`sk-...: x`).
    unknown = sorted(f if _FIELD_LIKE.match(str(f)) else "(one not shown)" for f in set(entry) - set(_FIELDS))
    missing = [f for f in _FIELDS[:4] if f not in entry]
    if unknown or missing:
        problem = f"unknown field(s) {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
        raise ImproperlyConfigured(f"{where}: {problem}; the fields are {', '.join(_FIELDS)}.")
    name, model = entry["name"], entry["model"]
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ImproperlyConfigured(
            f"{where}: name {name!r}: use 1-40 letters, digits, '_', '.' or '-' (it names a budget scope)."
        )
    if not isinstance(model, str) or not model.strip():
        raise ImproperlyConfigured(
            f"{where} ({name}): model must be the provider's model name, got {model!r}."
        )
    limits = {f: entry[f] for f in ("rpm", "tpm")}
    for key, value in limits.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ImproperlyConfigured(
                f"{where} ({name}): {key} must be a whole number of at least 1 "
                f"(the provider's limit per minute for this deployment), got {value!r}."
            )
    optional = {f: entry.get(f) for f in ("base_url", "api_key")}
    for key, value in optional.items():
        if value is not None and (not isinstance(value, str) or not value):
            raise ImproperlyConfigured(f"{where} ({name}): {key} must be a non-empty string or left out.")
    key_text = optional["api_key"] or ""
    if not all("!" <= c <= "~" for c in key_text):  # it goes into a header, as it is
        raise ImproperlyConfigured(
            f"{where} ({name}): api_key (not shown) holds a space, a line break or a character that is "
            "not printable ASCII: paste the key alone."
        )
    dialect = dialects.dialect_parse(entry, where=f"{where} ({name})", model=model)
    return Deployment(
        name=name,
        model=model,
        rpm=limits["rpm"],
        tpm=limits["tpm"],
        index=pools.get(name, 0),
        base_url=optional["base_url"],
        api_key=optional["api_key"],
        dialect=dialect,
    )


def _pairs(
    raw: str, *, variable: str, left_ok: Sequence[str], left_what: str, names: Sequence[str]
) -> dict[str, str]:
    found: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        left, eq, right = (s.strip() for s in item.partition("="))
        if not eq or not left or not right:
            raise ImproperlyConfigured(f"{variable}: {item!r}: expected <{left_what}>=<deployment name>.")
        if left not in left_ok:
            raise ImproperlyConfigured(
                f"{variable}: {item!r}: unknown {left_what} {left!r}; use one of {', '.join(left_ok)}."
            )
        if right not in names:
            raise ImproperlyConfigured(
                f"{variable}: {item!r}: no deployment named {right!r}; LLM_DEPLOYMENTS names "
                f"{', '.join(dict.fromkeys(names))}."
            )
        if left in found:
            raise ImproperlyConfigured(f"{variable}: {left!r} is given twice.")
        found[left] = right
    return found


def deployments() -> tuple[Deployment, ...]:
    """The configured deployments, or the implicit one from the current LLM_* settings."""
    from django.conf import settings

    explicit: tuple[Deployment, ...] = settings.LLM_DEPLOYMENTS
    if explicit:
        return explicit
    return (
        Deployment(
            name=settings.LLM_MODEL,
            model=settings.LLM_MODEL,
            rpm=settings.LLM_RPM,
            tpm=settings.LLM_TPM,
            implicit=True,
        ),
    )


def step_models() -> dict[str, str]:
    """Every step -> deployment name (LLM_STEP_MODELS, else every step on the first name)."""
    from django.conf import settings

    names = [d.name for d in deployments()]
    chosen: Mapping[str, str] = settings.LLM_STEP_MODELS
    return {step: chosen[step] if chosen.get(step) in names else names[0] for step in STEPS}
