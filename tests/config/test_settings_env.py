from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import database_from_url, env_bool, env_int

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_ENV = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "x" * 60 + "-not-a-real-production-secret-but-long-and-random-enough-9f8e7d",
    "DJANGO_ALLOWED_HOSTS": "outreach.example.com",
    "LLM_API_KEY": "sk-live",
    "WEBHOOK_SECRET": "whsec",
    "FLOWER_BASIC_AUTH": "ops:secret",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/outreach",
}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "LLM", "WEBHOOK", "FLOWER"))}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_integer_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_RPM", "lots")
    with pytest.raises(ImproperlyConfigured, match="LLM_RPM='lots': expected a whole number"):
        env_int("LLM_RPM", 300)


def test_bad_bool_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DJANGO_DEBUG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="DJANGO_DEBUG='maybe'"):
        env_bool("DJANGO_DEBUG", False)


def test_database_url_parsing() -> None:
    pg = database_from_url("DATABASE_URL", "postgres://u:p%40ss@db:6543/outreach")
    assert (pg["ENGINE"], pg["NAME"], pg["PASSWORD"], pg["PORT"]) == (
        "django.db.backends.postgresql",
        "outreach",
        "p@ss",
        "6543",
    )
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL='mysql://x': expected a postgres"):
        database_from_url("DATABASE_URL", "mysql://x")


def test_production_without_secret_key_refuses_to_start() -> None:
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr


def test_check_deploy_passes_with_production_env() -> None:
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr


def test_bad_dispatch_interval_is_a_clear_startup_error() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "DISPATCH_INTERVAL": "soon"})
    assert "DISPATCH_INTERVAL='soon': expected a whole number" in result.stderr


def test_min_share_parsing_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    from config.env import env_shares

    monkeypatch.setenv("DISPATCH_MIN_SHARE", "intro=0.1, nudge=0.05")
    assert env_shares("DISPATCH_MIN_SHARE", keys=["intro", "nudge"]) == {"intro": 0.1, "nudge": 0.05}
    for bad, message in [
        ("reply=0.1", "'reply' is not one of intro, nudge"),
        ("intro=lots", "needs a number"),
        ("intro=2", "must be between 0 and 1"),
        ("intro=0.6,nudge=0.6", "more than 1"),
    ]:
        monkeypatch.setenv("DISPATCH_MIN_SHARE", bad)
        with pytest.raises(ImproperlyConfigured, match=message):
            env_shares("DISPATCH_MIN_SHARE", keys=["intro", "nudge"])


@pytest.mark.parametrize(
    "secret", ["DJANGO_SECRET_KEY", "LLM_API_KEY", "WEBHOOK_SECRET", "FLOWER_BASIC_AUTH"]
)
@pytest.mark.parametrize("how", ["unset", "empty"])
def test_production_without_a_secret_stops_with_an_error_naming_it(secret: str, how: str) -> None:
    # given the production environment (DJANGO_DEBUG=0) with one secret missing or empty
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != secret}
    if how == "empty":
        env[secret] = ""
    # when any process starts (manage.py check stands in for web, workers, beat and flower)
    result = _manage("check", env=env)
    # then it stops with an error naming that secret, and no demo default was used in its place
    assert result.returncode != 0
    assert f"{secret} is not set: this setting has no default in this mode." in result.stderr


def test_short_stuck_timeout_is_flagged_by_the_system_check() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "DISPATCH_STUCK_AFTER_S": "60"})
    assert "orchestrator.W001" in result.stderr + result.stdout


def test_importing_config_leaves_settings_to_the_environment_set_afterwards() -> None:
    # a bench or the demo imports config helpers, then sets the environment of its stack: the
    # settings must be read then, not frozen at import (with a secret-less production default)
    script = (
        "import os; import devtools.processes; from django.conf import settings; "
        "assert not settings.configured, 'importing config loaded the settings'; "
        "os.environ.update(DJANGO_DEBUG='1', DISPATCH_INTERVAL='3'); "
        "from config.celery import app; print(app.conf.beat_schedule['dispatch-cycle']['schedule'])"
    )
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "DISPATCH"))}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=clean, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "3"


def test_lease_renewal_slower_than_half_the_ttl_names_the_variable() -> None:
    # given a heartbeat that could miss one beat and let a live job's lease expire
    env = {"DJANGO_DEBUG": "1", "GENERATION_LEASE_TTL_S": "30", "GENERATION_LEASE_RENEW_S": "20"}
    # when a process starts, then it refuses, naming the variable and the bound
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "GENERATION_LEASE_RENEW_S='20': must be at most 15." in result.stderr


def test_lease_renewal_defaults_to_a_third_of_the_ttl() -> None:
    result = _manage(
        "shell",
        "-c",
        "from django.conf import settings as s; print(s.GENERATION_LEASE_TTL_S, s.GENERATION_LEASE_RENEW_S)",
        env={"DJANGO_DEBUG": "1", "GENERATION_LEASE_TTL_S": "12"},
    )
    assert result.stdout.splitlines()[-1].split() == ["12.0", "4.0"]


def test_a_fractional_dispatch_interval_is_refused_not_rounded_to_zero() -> None:
    # django-celery-beat stores whole seconds: 0.5 used to become an interval of 0
    result = _manage("check", env={**PRODUCTION_ENV, "DISPATCH_INTERVAL": "0.5"})
    assert result.returncode != 0
    assert "DISPATCH_INTERVAL='0.5': expected a whole number." in result.stderr
    result = _manage("check", env={**PRODUCTION_ENV, "DISPATCH_INTERVAL": "0"})
    assert "DISPATCH_INTERVAL='0': must be at least 1." in result.stderr


def test_dotenv_file_is_read_and_the_environment_wins(tmp_path: Path) -> None:
    # given a .env file naming a setting, and another set in the environment as well
    env_file = tmp_path / ".env"
    env_file.write_text("LLM_MODEL=from-dotenv\nLLM_RPM=111\n")
    script = "from django.conf import settings; print(settings.LLM_MODEL, settings.LLM_RPM)"
    env = {**PRODUCTION_ENV, "DJANGO_ENV_FILE": str(env_file), "LLM_RPM": "222"}
    # when settings load
    result = _manage("shell", "-v", "0", "-c", script, env=env)
    # then the file fills what the environment leaves unset
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["from-dotenv", "222"]


def test_proxy_ssl_header_is_trusted_only_when_configured() -> None:
    script = "from django.conf import settings; print(getattr(settings, 'SECURE_PROXY_SSL_HEADER', None))"
    assert _manage("shell", "-v", "0", "-c", script, env=PRODUCTION_ENV).stdout.strip() == "None"
    configured = _manage(
        "shell", "-v", "0", "-c", script, env={**PRODUCTION_ENV, "DJANGO_SECURE_PROXY_SSL_HEADER": "1"}
    )
    assert configured.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https')"


def test_webhook_and_metrics_over_plain_http_are_answered_not_redirected() -> None:
    script = (
        "from django.test import Client; c = Client(); "
        "print(c.post('/hooks/replies/', b'{}', content_type='application/json').status_code, "
        "c.get('/metrics').status_code, c.get('/admin/login/').status_code)"
    )
    env = {**PRODUCTION_ENV, "DJANGO_ALLOWED_HOSTS": "testserver", "METRICS_TOKEN": "t"}
    result = _manage("shell", "-v", "0", "-c", script, env=env)
    assert result.returncode == 0, result.stderr
    webhook, metrics, admin = result.stdout.split()
    assert webhook == "401"  # answered (unsigned), not 301
    assert metrics == "401"  # answered (no token), not 301
    assert admin == "301"  # the rest still goes to HTTPS
