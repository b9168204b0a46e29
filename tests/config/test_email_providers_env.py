"""The email provider contract: EMAIL_BACKEND picks SMTP or a django-anymail backend,
ANYMAIL_<NAME> variables become anymail's settings, and the providers' webhooks exist only
with ANYMAIL_WEBHOOK_SECRET set."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import env_prefixed
from tests.config.test_settings_env import PRODUCTION_ENV, _manage

SHOW = "from django.conf import settings as s; print(s.EMAIL_BACKEND, sorted(s.ANYMAIL))"
ROUTES = (
    "from django.test import Client; "
    "print(Client().post('/hooks/anymail/postmark/inbound/', {}, content_type='application/json').status_code)"
)


def test_anymail_variables_become_the_anymail_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYMAIL_MAILGUN_API_KEY", "key-123")
    monkeypatch.setenv("ANYMAIL_AMAZON_SES_CLIENT_PARAMS", '{"region_name": "eu-west-1"}')
    monkeypatch.setenv("ANYMAIL_WEBHOOK_SECRET", '["user:old", "user:new"]')
    monkeypatch.setenv("ANYMAIL_EMPTY", "")

    found = env_prefixed("ANYMAIL_")

    assert {
        k: v
        for k, v in found.items()
        if k in {"MAILGUN_API_KEY", "AMAZON_SES_CLIENT_PARAMS", "WEBHOOK_SECRET", "EMPTY"}
    } == {
        "MAILGUN_API_KEY": "key-123",
        "AMAZON_SES_CLIENT_PARAMS": {"region_name": "eu-west-1"},
        "WEBHOOK_SECRET": ["user:old", "user:new"],
    }


def test_json_looking_value_that_is_not_json_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANYMAIL_SEND_DEFAULTS", "{tags: x}")
    with pytest.raises(ImproperlyConfigured, match="ANYMAIL_SEND_DEFAULTS: starts like JSON"):
        env_prefixed("ANYMAIL_")


@pytest.mark.slow
def test_smtp_is_the_default_and_a_provider_is_chosen_by_env() -> None:
    smtp = _manage("shell", "-v", "0", "-c", SHOW, env=PRODUCTION_ENV)
    mailgun = _manage(
        "shell",
        "-v",
        "0",
        "-c",
        SHOW,
        env={
            **PRODUCTION_ENV,
            "EMAIL_BACKEND": "anymail.backends.mailgun.EmailBackend",
            "ANYMAIL_MAILGUN_API_KEY": "key-123",
        },
    )
    assert smtp.stdout.split() == ["django.core.mail.backends.smtp.EmailBackend", "[]"]
    assert mailgun.stdout.split() == ["anymail.backends.mailgun.EmailBackend", "['MAILGUN_API_KEY']"]


@pytest.mark.slow
def test_an_email_backend_that_is_neither_django_nor_anymail_is_refused() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "EMAIL_BACKEND": "smtp"})
    assert result.returncode != 0
    assert "EMAIL_BACKEND='smtp'" in result.stderr


@pytest.mark.slow
def test_provider_webhooks_exist_only_with_a_basic_auth_secret() -> None:
    env = {**PRODUCTION_ENV, "DJANGO_ALLOWED_HOSTS": "testserver"}
    without = _manage("shell", "-v", "0", "-c", ROUTES, env=env)
    with_secret = _manage("shell", "-v", "0", "-c", ROUTES, env={**env, "ANYMAIL_WEBHOOK_SECRET": "u:p"})
    assert without.stdout.strip() == "404"
    assert with_secret.stdout.strip() == "400"  # there, and refusing the unauthenticated call


@pytest.mark.slow
def test_a_provider_without_its_api_key_stops_the_checks_naming_the_setting() -> None:
    env = {**PRODUCTION_ENV, "EMAIL_BACKEND": "anymail.backends.postmark.EmailBackend"}
    missing = _manage("check", env=env)
    configured = _manage("check", env={**env, "ANYMAIL_POSTMARK_SERVER_TOKEN": "token"})
    assert missing.returncode != 0
    assert "orchestrator.E001" in missing.stderr
    assert "POSTMARK_SERVER_TOKEN" in missing.stderr
    assert configured.returncode == 0, configured.stderr
