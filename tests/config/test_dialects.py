"""LLM_DEPLOYMENTS dialects (config.dialects through config.deployments.deployments_parse): the
presets, fields over a preset, and hostile entries refused naming the entry, the deployment and
the field, never showing a header's value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.deployments import deployments_parse
from config.dialects import AZURE_API_VERSION, Dialect

BASE = {"name": "big", "model": "gpt-x", "rpm": 60, "tpm": 60_000}


def _one(**fields: Any) -> Dialect:
    (deployment,) = deployments_parse(json.dumps([{**BASE, **fields}]))
    return deployment.dialect


def _refused(*entries: dict[str, Any]) -> str:
    with pytest.raises(ImproperlyConfigured) as caught:
        deployments_parse(json.dumps(list(entries)))
    return str(caught.value)


def test_an_entry_without_a_dialect_speaks_todays_request() -> None:
    assert _one() == Dialect(
        preset="openai_compatible",
        token_param="max_tokens",
        auth="bearer",
        path="/chat/completions",
        extra_query=(),
        extra_headers=(),
        extra_body=(),
    )


def test_the_openai_preset_sends_max_completion_tokens() -> None:
    assert _one(dialect="openai") == Dialect(
        preset="openai", token_param="max_completion_tokens", auth="bearer", path="/chat/completions"
    )


def test_the_azure_preset_is_the_classic_deployments_url_with_an_api_key_and_version() -> None:
    assert _one(dialect="azure") == Dialect(
        preset="azure",
        token_param="max_tokens",
        auth="api-key",
        path="/openai/deployments/{model}/chat/completions",
        extra_query=(("api-version", "2024-10-21"),),
    )
    assert AZURE_API_VERSION == "2024-10-21"


def test_fields_given_override_the_preset_and_maps_merge_over_it() -> None:
    # given an Azure reasoning deployment on a newer api-version, with a header and body options
    dialect = _one(
        dialect="azure",
        token_param="max_completion_tokens",
        extra_query={"api-version": "2025-01-01-preview", "trace": "1"},
        extra_headers={"OpenAI-Organization": "org-1", "x-ms-useragent": "outreach"},
        extra_body={"reasoning_effort": "low", "metadata": {"app": "outreach"}},
    )
    # then the preset's auth and path stay, the given fields win, the maps merge key by key
    assert (dialect.auth, dialect.path, dialect.token_param) == (
        "api-key",
        "/openai/deployments/{model}/chat/completions",
        "max_completion_tokens",
    )
    assert dialect.extra_query == (("api-version", "2025-01-01-preview"), ("trace", "1"))
    assert dialect.extra_headers == (("OpenAI-Organization", "org-1"), ("x-ms-useragent", "outreach"))
    assert dialect.body_fields() == {"reasoning_effort": "low", "metadata": {"app": "outreach"}}


def test_an_openai_compatible_server_with_an_api_key_header_and_its_own_path() -> None:
    dialect = _one(auth="api-key", path="/api/v2/chat")
    assert (dialect.preset, dialect.auth, dialect.path, dialect.token_param) == (
        "openai_compatible",
        "api-key",
        "/api/v2/chat",
        "max_tokens",
    )


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            {"dialect": "azur"},
            "LLM_DEPLOYMENTS entry 1 (big): dialect: use one of openai_compatible, openai, azure, got 'azur'.",
        ),
        (
            {"token_param": "max_output_tokens"},
            "LLM_DEPLOYMENTS entry 1 (big): token_param: use one of max_tokens, max_completion_tokens, got 'max_output_tokens'.",
        ),
        ({"auth": "basic"}, "LLM_DEPLOYMENTS entry 1 (big): auth: use one of bearer, api-key, got 'basic'."),
        (
            {"auth": ["bearer"]},
            "LLM_DEPLOYMENTS entry 1 (big): auth: use one of bearer, api-key, got a list.",
        ),
        ({"path": "chat/completions"}, "LLM_DEPLOYMENTS entry 1 (big): path: a URL path starting with '/'"),
        ({"path": "/v1/../admin"}, "LLM_DEPLOYMENTS entry 1 (big): path: a URL path starting with '/'"),
        ({"path": "/chat?x=1"}, "LLM_DEPLOYMENTS entry 1 (big): path: a URL path starting with '/'"),
        (
            {"extra_headers": ["x-a: 1"]},
            "LLM_DEPLOYMENTS entry 1 (big): extra_headers: expected an object of names and values, got a list.",
        ),
        (
            {"extra_headers": {"Authorization": "Bearer sk-other"}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_headers: 'Authorization' is set by the client (use api_key and auth for the key).",
        ),
        (
            {"extra_headers": {"API-KEY": "k"}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_headers: 'API-KEY' is set by the client",
        ),
        (
            {"extra_headers": {"bad name": "1"}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_headers: a header name (not shown) is not a valid HTTP header name.",
        ),
        (
            {"extra_headers": {"x-key": 42}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_headers: the value of 'x-key' (not shown: it may hold a key) must be a string of one line",
        ),
        (
            {"extra_headers": {"x-team": "M\u00fcller"}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_headers: the value of 'x-team' (not shown: it may hold a key) must be a string of one line, 1-8192 printable ASCII characters; quote it in YAML.",
        ),
        (
            {"extra_query": {"api-version": 2024}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_query: the value of 'api-version' must be a string of one line",
        ),
        (
            {"extra_query": {"a&b": "1"}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_query: a parameter name (not shown)",
        ),
        (
            {"extra_body": {"max_tokens": 10}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_body: 'max_tokens' is set by the client (the token parameter's name is token_param).",
        ),
        (
            {"extra_body": {"model": "other"}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_body: 'model' is set by the client",
        ),
        (
            {"extra_body": "reasoning_effort=low"},
            "LLM_DEPLOYMENTS entry 1 (big): extra_body: expected an object of names and values, got a str.",
        ),
        (
            {"dialect": "azure", "model": "gpt 4o/../x"},
            "LLM_DEPLOYMENTS entry 1 (big): model: goes into the URL path /openai/deployments/{model}/chat/completions",
        ),
        (
            {"dialect": "azure", "extra_query": {"api-version": ""}},
            "LLM_DEPLOYMENTS entry 1 (big): extra_query: the value of 'api-version' must be a string",
        ),
    ],
)
def test_a_bad_dialect_field_is_refused_naming_the_entry_the_deployment_and_the_field(
    fields: dict[str, Any], expected: str
) -> None:
    assert _refused({**BASE, **fields}).startswith(expected)


def test_the_second_entry_is_named_as_the_second() -> None:
    message = _refused(BASE, {**BASE, "name": "small", "token_param": "tokens"})
    assert message.startswith("LLM_DEPLOYMENTS entry 2 (small): token_param:")


def test_a_header_value_is_never_shown_not_in_an_error_nor_in_a_repr() -> None:
    # given a header holding a key, with a line break pasted into it
    secret = "sk-proj-SECRET-1234567890"
    message = _refused({**BASE, "extra_headers": {"x-api-token": secret + "\nX-Evil: 1"}})
    # then the error names the header, not its value
    assert "x-api-token" in message
    assert secret not in message
    assert "X-Evil" not in message
    # and a parsed deployment's repr (a log line, a traceback) holds neither key
    (deployment,) = deployments_parse(
        json.dumps([{**BASE, "api_key": "sk-main-SECRET", "extra_headers": {"x-api-token": secret}}])
    )
    assert secret not in repr(deployment)
    assert "sk-main-SECRET" not in repr(deployment)
    assert "x-api-token" not in repr(deployment)


def test_a_hostile_dialect_name_is_not_echoed() -> None:
    message = _refused({**BASE, "dialect": "sk-live-SECRET key=value"})
    assert "sk-live-SECRET" not in message
    assert message.startswith("LLM_DEPLOYMENTS entry 1 (big): dialect: use one of")


def test_an_unquoted_api_version_in_yaml_is_a_date_and_refused_saying_to_quote_it(tmp_path: Path) -> None:
    # given a YAML file where api-version is written without quotes (YAML reads it as a date)
    path = tmp_path / "deployments.yaml"
    path.write_text(
        "- name: az\n  model: gpt4o-prod\n  rpm: 60\n  tpm: 60000\n  dialect: azure\n"
        "  extra_query:\n    api-version: 2025-01-01\n"
    )
    with pytest.raises(ImproperlyConfigured) as caught:
        deployments_parse(f"@{path}")
    # then the error says which field and how to fix it
    assert str(caught.value).startswith(
        "LLM_DEPLOYMENTS entry 1 (az): extra_query: the value of 'api-version' must be a string of one"
        ' line (quote it in YAML: api-version: "2024-10-21" is a string'
    )
    # and quoted, it parses
    path.write_text(path.read_text().replace("2025-01-01", '"2025-01-01"'))
    (deployment,) = deployments_parse(f"@{path}")
    assert deployment.dialect.extra_query == (("api-version", "2025-01-01"),)


def test_an_extra_body_value_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "deployments.yaml"
    path.write_text("- {name: a, model: m, rpm: 1, tpm: 1, extra_body: {since: 2025-01-01}}\n")
    with pytest.raises(ImproperlyConfigured) as caught:
        deployments_parse(f"@{path}")
    assert str(caught.value) == (
        "LLM_DEPLOYMENTS entry 1 (a): extra_body: the value of 'since' is not JSON (a YAML date or time? quote it)."
    )


def test_the_listed_fields_include_the_dialects() -> None:
    message = _refused({**BASE, "headers": {"a": "b"}})
    assert message == (
        "LLM_DEPLOYMENTS entry 1: unknown field(s) headers; the fields are name, model, rpm, tpm, "
        "base_url, api_key, dialect, token_param, auth, path, extra_headers, extra_query, extra_body."
    )


def test_an_api_key_with_a_line_break_is_refused_without_showing_it() -> None:
    message = _refused({**BASE, "api_key": "sk-SECRET-1\n"})
    assert message == (
        "LLM_DEPLOYMENTS entry 1 (big): api_key (not shown) holds a space, a line break or a character "
        "that is not printable ASCII: paste the key alone."
    )
