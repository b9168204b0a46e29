"""How a deployment's provider wants its chat-completions request: its dialect, parsed once.

A dialect is the part of the request that differs between OpenAI-compatible providers:

  token_param    `max_tokens` (most compatible servers) or `max_completion_tokens` (OpenAI's
                 current name; its reasoning models refuse `max_tokens` with a 400)
  auth           `bearer` (`Authorization: Bearer <key>`) or `api-key` (`api-key: <key>`, Azure)
  path           appended to base_url; `{model}` is replaced by the deployment's model
                 (Azure: `/openai/deployments/{model}/chat/completions`, the model being the
                 Azure deployment name)
  extra_headers  sent with every call (an organization or project header)
  extra_query    query parameters (Azure's `api-version`)
  extra_body     extra fields of the JSON body (`reasoning_effort`, a server's own options)

A preset (`dialect` in an LLM_DEPLOYMENTS entry) gives all of them; fields given beside it
override the preset's, and the three `extra_*` maps are merged key by key over the preset's.
`dialect_parse` is pure; every error names the entry, the deployment and the field, and never
shows a header or query value (a header may hold a key).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, cast

from django.core.exceptions import ImproperlyConfigured

TokenParam = Literal["max_tokens", "max_completion_tokens"]
Auth = Literal["bearer", "api-key"]
TOKEN_PARAMS: Final[tuple[TokenParam, ...]] = ("max_tokens", "max_completion_tokens")
AUTHS: Final[tuple[Auth, ...]] = ("bearer", "api-key")
# Azure OpenAI's generally available data-plane version that takes max_completion_tokens too.
AZURE_API_VERSION: Final = "2024-10-21"
FIELDS: Final = ("dialect", "token_param", "auth", "path", "extra_headers", "extra_query", "extra_body")


@dataclass(frozen=True, slots=True)
class Dialect:
    """Frozen and hashable, like the Deployment that holds it: the maps are sorted pairs, body
    values as JSON text. The headers are left out of repr: a header may hold a key."""

    preset: str = "openai_compatible"
    token_param: TokenParam = "max_tokens"
    auth: Auth = "bearer"
    path: str = "/chat/completions"
    extra_query: tuple[tuple[str, str], ...] = ()
    extra_headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    extra_body: tuple[tuple[str, str], ...] = ()  # (field, its value as JSON text)

    def body_fields(self) -> dict[str, Any]:
        return {name: json.loads(value) for name, value in self.extra_body}


PRESETS: Final[Mapping[str, Dialect]] = {
    # Today's request, understood by vLLM, Ollama, LiteLLM, llm_sim and most gateways.
    "openai_compatible": Dialect(),
    # api.openai.com: max_completion_tokens, which every OpenAI chat model takes and its
    # reasoning models require.
    "openai": Dialect(preset="openai", token_param="max_completion_tokens"),
    # Classic Azure OpenAI: base_url https://<resource>.openai.azure.com, model = the Azure
    # deployment name. (Azure's reasoning deployments need token_param max_completion_tokens.)
    "azure": Dialect(
        preset="azure",
        auth="api-key",
        path="/openai/deployments/{model}/chat/completions",
        extra_query=(("api-version", AZURE_API_VERSION),),
    ),
}
DEFAULT: Final = PRESETS["openai_compatible"]

# Set by the client from the deployment's other fields: an extra header or body field must not
# replace them (a second Authorization would carry a key past `api_key`'s handling).
_OWN_HEADERS: Final = frozenset(
    {"authorization", "api-key", "content-type", "content-length", "host", "transfer-encoding", "connection"}
)
_OWN_BODY: Final = frozenset(
    {"model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options", "n"}
)
_HEADER_NAME: Final = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}$")  # RFC 9110 token
_QUERY_NAME: Final = re.compile(r"^[A-Za-z0-9_.~\-]{1,100}$")
_BODY_NAME: Final = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_PATH: Final = re.compile(r"^/[A-Za-z0-9_.~\-/]*$")
_MODEL_IN_PATH: Final = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")  # Azure deployment names
_MAX_VALUE: Final = 8192


def dialect_parse(entry: Mapping[str, Any], *, where: str, model: str) -> Dialect:
    """The dialect of one LLM_DEPLOYMENTS entry (`where` names it, e.g. `LLM_DEPLOYMENTS entry
    2 (large)`): its preset with the fields the entry gives over it."""
    preset_name = entry.get("dialect", DEFAULT.preset)
    if preset_name not in PRESETS:
        raise _bad(where, "dialect", f"use one of {', '.join(PRESETS)}, got {_shown(preset_name)}")
    dialect = PRESETS[preset_name]
    changes: dict[str, Any] = {}
    if "token_param" in entry:
        changes["token_param"] = _choice(entry["token_param"], TOKEN_PARAMS, where=where, name="token_param")
    if "auth" in entry:
        changes["auth"] = _choice(entry["auth"], AUTHS, where=where, name="auth")
    if "path" in entry:
        changes["path"] = _path(entry["path"], where=where)
    for name, pairs in (
        ("extra_headers", _headers),
        ("extra_query", _query),
        ("extra_body", _body),
    ):
        if name in entry:
            given = pairs(_mapping(entry[name], where=where, name=name), where=where)
            changes[name] = _merged(getattr(dialect, name), given, fold=name == "extra_headers")
    dialect = replace(dialect, **changes)
    if "{model}" in dialect.path and not _MODEL_IN_PATH.match(model):
        raise _bad(
            where,
            "model",
            f"goes into the URL path {dialect.path}: use 1-64 letters, digits, '_', '.' or '-'",
        )
    return dialect


def _bad(where: str, name: str, problem: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{where}: {name}: {problem}.")


def _shown(value: object) -> str:
    """A value in an error only when it looks like a word: a malformed line may hold a key."""
    text = str(value)
    return repr(text) if isinstance(value, str) and _BODY_NAME.match(text) else f"a {type(value).__name__}"


def _choice(value: object, allowed: tuple[str, ...], *, where: str, name: str) -> str:
    if value not in allowed:
        raise _bad(where, name, f"use one of {', '.join(allowed)}, got {_shown(value)}")
    return cast(str, value)


def _path(value: object, *, where: str) -> str:
    text = value.replace("{model}", "m") if isinstance(value, str) else ""
    if not _PATH.match(text) or "//" in text or "/../" in f"{text}/":
        raise _bad(
            where,
            "path",
            "a URL path starting with '/' of letters, digits, '_', '.', '~', '-' and '/', with "
            "{model} where the model goes (e.g. /openai/deployments/{model}/chat/completions)",
        )
    return cast(str, value)


def _mapping(value: object, *, where: str, name: str) -> Mapping[Any, Any]:
    if not isinstance(value, dict):
        raise _bad(where, name, f"expected an object of names and values, got a {type(value).__name__}")
    return value


def _headers(given: Mapping[Any, Any], *, where: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in given.items():
        if not isinstance(name, str) or not _HEADER_NAME.match(name):
            raise _bad(where, "extra_headers", "a header name (not shown) is not a valid HTTP header name")
        if name.lower() in _OWN_HEADERS:
            raise _bad(
                where,
                "extra_headers",
                f"{name!r} is set by the client (use api_key and auth for the key)",
            )
        # Printable ASCII only: a header is sent as bytes, and an accented letter or a line
        # break would fail every call (or, unchecked, smuggle a second header).
        if not _one_line(value) or not all(" " <= c <= "~" or c == "\t" for c in value):
            raise _bad(
                where,
                "extra_headers",
                f"the value of {name!r} (not shown: it may hold a key) must be a string of one line, "
                f"1-{_MAX_VALUE} printable ASCII characters; quote it in YAML",
            )
        found[name] = value
    return found


def _query(given: Mapping[Any, Any], *, where: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in given.items():
        if not isinstance(name, str) or not _QUERY_NAME.match(name):
            raise _bad(where, "extra_query", "a parameter name (not shown) is not letters, digits, '_.~-'")
        if not _one_line(value):
            raise _bad(
                where,
                "extra_query",
                f"the value of {name!r} must be a string of one line (quote it in YAML: "
                f'{name}: "{AZURE_API_VERSION}" is a string, {name}: {AZURE_API_VERSION} a date)',
            )
        found[name] = value
    return found


def _body(given: Mapping[Any, Any], *, where: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, value in given.items():
        if not isinstance(name, str) or not _BODY_NAME.match(name):
            raise _bad(where, "extra_body", "a field name (not shown) is not 1-64 letters, digits, '_.-'")
        if name in _OWN_BODY:
            raise _bad(
                where,
                "extra_body",
                f"{name!r} is set by the client (the token parameter's name is token_param)",
            )
        try:
            found[name] = json.dumps(value, allow_nan=False, sort_keys=True)
        except (TypeError, ValueError):
            raise _bad(
                where,
                "extra_body",
                f"the value of {name!r} is not JSON (a YAML date or time? quote it)",
            ) from None
    return found


def _one_line(value: object) -> bool:
    return isinstance(value, str) and 0 < len(value) <= _MAX_VALUE and not any(c in value for c in "\r\n\0")


def _merged(
    preset: tuple[tuple[str, str], ...], given: Mapping[str, str], *, fold: bool
) -> tuple[tuple[str, str], ...]:
    """The preset's pairs with the given ones over them (header names compared without case)."""
    key = str.lower if fold else str
    given_keys = {key(name) for name in given}
    kept = [(name, value) for name, value in preset if key(name) not in given_keys]
    return tuple(sorted([*kept, *given.items()]))
