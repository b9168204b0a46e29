"""The LLM_DEPLOYMENTS / LLM_STEP_MODELS / LLM_FALLBACKS contract: parsed, and refused with an
error naming the variable, the entry and what to do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.deployments import (
    Deployment,
    deployments,
    deployments_parse,
    fallbacks_parse,
    step_models,
    step_models_parse,
)

TWO_MODELS = json.dumps(
    [
        {"name": "small", "model": "gpt-small", "rpm": 600, "tpm": 600000},
        {
            "name": "large",
            "model": "gpt-large",
            "rpm": 120,
            "tpm": 200000,
            "base_url": "http://b/v1",
            "api_key": "k2",
        },
        {"name": "large", "model": "gpt-large", "rpm": 120, "tpm": 200000},
    ]
)


def test_deployments_sharing_a_name_are_a_pool_each_with_its_own_scope() -> None:
    found = deployments_parse(TWO_MODELS)

    assert [(d.label, d.scope, d.model, d.rpm) for d in found] == [
        ("small#0", "dep:small:0", "gpt-small", 600),
        ("large#0", "dep:large:0", "gpt-large", 120),
        ("large#1", "dep:large:1", "gpt-large", 120),
    ]
    assert (found[1].base_url, found[1].api_key, found[2].base_url) == ("http://b/v1", "k2", None)


def test_a_yaml_file_is_read_with_at_path(tmp_path: Path) -> None:
    path = tmp_path / "deployments.yaml"
    path.write_text("- {name: small, model: m, rpm: 10, tpm: 1000}\n")

    assert deployments_parse(f"@{path}") == (Deployment(name="small", model="m", rpm=10, tpm=1000),)


SECRET = "sk-live-abc123SECRET"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (f'  api_key: "{SECRET}\n', 6),  # a quote never closed: the error is at the end of the file
        (f"  api_key: {SECRET}: x\n", 5),  # ': ' inside an unquoted value
        (f"\tapi_key: {SECRET}\n", 5),  # a tab for indentation
        (f"  api_key: [{SECRET}\n", 6),  # a flow list never closed
    ],
)
def test_a_malformed_yaml_file_never_echoes_its_key_line(tmp_path: Path, text: str, line: int) -> None:
    # given a deployments file whose api_key line is malformed
    path = tmp_path / "deployments.yaml"
    path.write_text("- name: main\n  model: gpt-4o-mini\n  rpm: 500\n  tpm: 200000\n" + text)
    # when it is read, then the error says where and what to fix, and shows no piece of the key
    with pytest.raises(ImproperlyConfigured) as error:
        deployments_parse(f"@{path}")
    message = str(error.value)
    assert message.startswith(f"LLM_DEPLOYMENTS: {path} is not valid YAML at line {line}, column ")
    assert "quote" in message
    for piece in (SECRET, "abc123", "SECRET", "sk-live"):
        assert piece not in message


@pytest.mark.parametrize(
    "text",
    [
        f"- name: main\n  model: m\n  rpm: 1\n  tpm: 1\n  {SECRET}: x\n",  # the key as a field name
        f"- {SECRET}\n",  # an entry that is the key alone
    ],
)
def test_a_key_misplaced_in_the_file_is_not_echoed(tmp_path: Path, text: str) -> None:
    path = tmp_path / "deployments.yaml"
    path.write_text(text)
    with pytest.raises(ImproperlyConfigured) as error:
        deployments_parse(f"@{path}")
    assert "entry 1" in str(error.value)
    assert "abc123" not in str(error.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json", "LLM_DEPLOYMENTS: its value is not valid JSON"),
        ("[]", "LLM_DEPLOYMENTS: expected a non-empty list"),
        ('[{"name": "a", "model": "m", "rpm": 10}]', "LLM_DEPLOYMENTS entry 1: missing tpm"),
        ('[{"name": "a", "model": "m", "rpm": 10, "tpm": 9, "key": "x"}]', "entry 1: unknown field(s) key"),
        ('[{"name": "a b", "model": "m", "rpm": 1, "tpm": 1}]', "entry 1: name 'a b': use 1-40 letters"),
        (
            '[{"name": "a", "model": "m", "rpm": 1, "tpm": 1}, {"name": "b", "model": "m", "rpm": 0, "tpm": 1}]',
            "LLM_DEPLOYMENTS entry 2 (b): rpm must be a whole number of at least 1",
        ),
        ("@/nonexistent/deployments.json", "LLM_DEPLOYMENTS=@/nonexistent/deployments.json: cannot read"),
    ],
)
def test_bad_deployments_name_the_entry_and_what_to_do(raw: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        deployments_parse(raw)

    assert message in str(caught.value)


def test_steps_not_named_use_the_first_deployment() -> None:
    assert step_models_parse("message=large", names=["small", "large"]) == {
        "triage": "small",
        "plan": "small",
        "context": "small",
        "message": "large",
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "message=huge",
            "LLM_STEP_MODELS: 'message=huge': no deployment named 'huge'; LLM_DEPLOYMENTS names small, large",
        ),
        (
            "draft=small",
            "LLM_STEP_MODELS: 'draft=small': unknown step 'draft'; use one of triage, plan, context, message",
        ),
        ("message", "LLM_STEP_MODELS: 'message': expected <step>=<deployment name>"),
        ("plan=small,plan=large", "LLM_STEP_MODELS: 'plan' is given twice"),
    ],
)
def test_bad_step_models_are_refused(raw: str, message: str) -> None:
    with pytest.raises(ImproperlyConfigured) as caught:
        step_models_parse(raw, names=["small", "large"])

    assert message in str(caught.value)


def test_fallbacks_are_parsed_and_checked() -> None:
    assert fallbacks_parse("large=small", names=["small", "large"]) == {"large": "small"}
    with pytest.raises(ImproperlyConfigured, match="a name cannot be its own fallback"):
        fallbacks_parse("large=large", names=["small", "large"])
    with pytest.raises(ImproperlyConfigured, match="LLM_FALLBACKS: 'large=tiny': no deployment named 'tiny'"):
        fallbacks_parse("large=tiny", names=["small", "large"])


def test_absent_deployments_mean_todays_single_model_on_the_provider_scope(settings: Any) -> None:
    # given no LLM_DEPLOYMENTS, and settings changed after start-up (as tests and stubs do)
    settings.LLM_DEPLOYMENTS, settings.LLM_STEP_MODELS = (), {}
    settings.LLM_MODEL, settings.LLM_RPM, settings.LLM_TPM = "stub-1", 77, 7700
    # then one deployment, from them, whose budget scope is the provider's, runs every step
    (only,) = deployments()
    assert (only.model, only.rpm, only.tpm, only.scope, only.base_url) == (
        "stub-1",
        77,
        7700,
        "provider",
        None,
    )
    assert step_models() == {"triage": "stub-1", "plan": "stub-1", "context": "stub-1", "message": "stub-1"}
