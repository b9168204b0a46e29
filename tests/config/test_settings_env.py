from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.env import database_from_url, env_bool, env_int, env_int_if_set, env_ints

ROOT = Path(__file__).resolve().parents[2]

PRODUCTION_ENV = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": "x" * 60 + "-not-a-real-production-secret-but-long-and-random-enough-9f8e7d",
    "DJANGO_ALLOWED_HOSTS": "outreach.example.com",
    "LLM_API_KEY": "sk-live",
    "WEBHOOK_SECRET": "whsec",
    "FLOWER_BASIC_AUTH": "ops:secret",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/outreach",
    "PUBLIC_BASE_URL": "https://outreach.example.com",
    "DEFAULT_FROM_EMAIL": "outreach@outreach.example.com",
    "METRICS_TOKEN": "scrape-token",
}
# Variables a test's own environment must not leak into a settings subprocess.
SETTINGS_PREFIXES = (
    "DJANGO",
    "LLM",
    "WEBHOOK",
    "FLOWER",
    "PUBLIC_BASE_URL",
    "DEFAULT_FROM_EMAIL",
    "METRICS_",
    "EMAIL_",
    "RETENTION_",
    "ANYMAIL_",
)


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(SETTINGS_PREFIXES)}
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


def test_send_limits_are_absent_unless_set_and_bad_ones_name_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("EMAIL_RATE_PER_SECOND", raising=False)
    monkeypatch.delenv("EMAIL_WARMUP", raising=False)
    assert (env_int_if_set("EMAIL_RATE_PER_SECOND", minimum=2), env_ints("EMAIL_WARMUP", minimum=1)) == (
        None,
        [],
    )
    monkeypatch.setenv("EMAIL_RATE_PER_SECOND", "1")
    with pytest.raises(ImproperlyConfigured, match="EMAIL_RATE_PER_SECOND='1': must be at least 2"):
        env_int_if_set("EMAIL_RATE_PER_SECOND", minimum=2)
    monkeypatch.setenv("EMAIL_WARMUP", "50, 100,200")
    assert env_ints("EMAIL_WARMUP", minimum=1) == [50, 100, 200]
    monkeypatch.setenv("EMAIL_WARMUP", "50,lots,200")
    with pytest.raises(
        ImproperlyConfigured, match="EMAIL_WARMUP='50,lots,200': expected whole numbers of at least 1"
    ):
        env_ints("EMAIL_WARMUP", minimum=1)


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


@pytest.mark.slow
def test_production_without_secret_key_refuses_to_start() -> None:
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "DJANGO_SECRET_KEY"}
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY is not set" in result.stderr


@pytest.mark.slow
def test_check_deploy_passes_with_production_env() -> None:
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
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


REQUIRED_IN_PRODUCTION = [
    "DJANGO_SECRET_KEY",
    "LLM_API_KEY",
    "WEBHOOK_SECRET",
    "FLOWER_BASIC_AUTH",
    # a demo address in List-Unsubscribe links or From: headers would reach real recipients
    "PUBLIC_BASE_URL",
    "DEFAULT_FROM_EMAIL",
    # an open /metrics shows every organization's owners and the whole budget
    "METRICS_TOKEN",
]


@pytest.mark.slow
@pytest.mark.parametrize("secret", REQUIRED_IN_PRODUCTION)
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


@pytest.mark.slow
def test_short_stuck_timeout_is_flagged_by_the_system_check() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "DISPATCH_STUCK_AFTER_S": "60"})
    assert "orchestrator.W001" in result.stderr + result.stdout


@pytest.mark.slow
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


@pytest.mark.slow
def test_lease_renewal_slower_than_half_the_ttl_names_the_variable() -> None:
    # given a heartbeat that could miss one beat and let a live job's lease expire
    env = {"DJANGO_DEBUG": "1", "GENERATION_LEASE_TTL_S": "30", "GENERATION_LEASE_RENEW_S": "20"}
    # when a process starts, then it refuses, naming the variable and the bound
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "GENERATION_LEASE_RENEW_S='20': must be at most 15." in result.stderr


@pytest.mark.slow
def test_lease_renewal_defaults_to_a_third_of_the_ttl() -> None:
    result = _manage(
        "shell",
        "-c",
        "from django.conf import settings as s; print(s.GENERATION_LEASE_TTL_S, s.GENERATION_LEASE_RENEW_S)",
        env={"DJANGO_DEBUG": "1", "GENERATION_LEASE_TTL_S": "12"},
    )
    assert result.stdout.splitlines()[-1].split() == ["12.0", "4.0"]


@pytest.mark.slow
def test_a_fractional_dispatch_interval_is_refused_not_rounded_to_zero() -> None:
    # django-celery-beat stores whole seconds: 0.5 used to become an interval of 0
    result = _manage("check", env={**PRODUCTION_ENV, "DISPATCH_INTERVAL": "0.5"})
    assert result.returncode != 0
    assert "DISPATCH_INTERVAL='0.5': expected a whole number." in result.stderr
    result = _manage("check", env={**PRODUCTION_ENV, "DISPATCH_INTERVAL": "0"})
    assert "DISPATCH_INTERVAL='0': must be at least 1." in result.stderr


@pytest.mark.slow
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


@pytest.mark.slow
def test_proxy_ssl_header_is_trusted_only_when_configured() -> None:
    script = "from django.conf import settings; print(getattr(settings, 'SECURE_PROXY_SSL_HEADER', None))"
    assert _manage("shell", "-v", "0", "-c", script, env=PRODUCTION_ENV).stdout.strip() == "None"
    configured = _manage(
        "shell", "-v", "0", "-c", script, env={**PRODUCTION_ENV, "DJANGO_SECURE_PROXY_SSL_HEADER": "1"}
    )
    assert configured.stdout.strip() == "('HTTP_X_FORWARDED_PROTO', 'https')"


@pytest.mark.slow
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


def _settings_line(*names: str, env: dict[str, str]) -> list[str]:
    script = f"from django.conf import settings as s; print(*[getattr(s, n) for n in {list(names)!r}])"
    result = _manage("shell", "-v", "0", "-c", script, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


SMTP_LOGIN = {"EMAIL_HOST_USER": "mailer", "EMAIL_HOST_PASSWORD": "smtp-password"}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, ["False", "False"]),  # no login (a local relay or sink): nothing to protect
        (SMTP_LOGIN, ["True", "False"]),  # a login and no choice made: STARTTLS
        ({**SMTP_LOGIN, "EMAIL_USE_SSL": "1"}, ["False", "True"]),  # implicit TLS chosen instead
        ({**SMTP_LOGIN, "EMAIL_USE_TLS": "1"}, ["True", "False"]),
        ({**SMTP_LOGIN, "EMAIL_USE_TLS": "0", "EMAIL_ALLOW_PLAINTEXT_AUTH": "1"}, ["False", "False"]),
    ],
)
def test_smtp_credentials_go_over_tls_unless_plaintext_is_explicitly_allowed(
    given: dict[str, str], expected: list[str]
) -> None:
    assert _settings_line("EMAIL_USE_TLS", "EMAIL_USE_SSL", env={**PRODUCTION_ENV, **given}) == expected


@pytest.mark.slow
def test_smtp_login_with_tls_turned_off_refuses_to_start_without_the_opt_out() -> None:
    # given SMTP credentials and TLS turned off, without EMAIL_ALLOW_PLAINTEXT_AUTH
    result = _manage("check", env={**PRODUCTION_ENV, **SMTP_LOGIN, "EMAIL_USE_TLS": "0"})
    # then the process stops, naming the variables, rather than send the password in clear
    assert result.returncode != 0
    assert "EMAIL_USE_TLS=0 with EMAIL_HOST_USER/EMAIL_HOST_PASSWORD set" in result.stderr
    assert "EMAIL_ALLOW_PLAINTEXT_AUTH=1" in result.stderr


@pytest.mark.slow
def test_plaintext_smtp_login_opt_out_is_loud() -> None:
    # given the documented opt-out, every process start says so (a system check warning)
    env = {**PRODUCTION_ENV, **SMTP_LOGIN, "EMAIL_USE_TLS": "0", "EMAIL_ALLOW_PLAINTEXT_AUTH": "1"}
    result = _manage("check", env=env)
    assert "orchestrator.W002" in result.stderr + result.stdout
    assert "in clear" in result.stderr + result.stdout


@pytest.mark.slow
def test_tls_and_ssl_together_are_refused() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "EMAIL_USE_TLS": "1", "EMAIL_USE_SSL": "1"})
    assert result.returncode != 0
    assert "EMAIL_USE_TLS and EMAIL_USE_SSL are both on" in result.stderr


@pytest.mark.parametrize(
    "url",
    [
        "postgres://app:hunter2-secret@db:5432/",  # names no database
        "mysql://app:hunter2-secret@db/outreach",  # wrong scheme
        "postgres://app:hunter2-secret@db:port/outreach",  # a port that is not a number
        "postgres://db/?password=hunter2-secret",  # libpq's query form, no database
    ],
)
def test_bad_database_url_error_names_the_variable_and_hides_the_password(url: str) -> None:
    with pytest.raises(ImproperlyConfigured) as error:
        database_from_url("DATABASE_URL", url)
    assert str(error.value).startswith("DATABASE_URL=")
    assert "hunter2-secret" not in str(error.value)
    assert "***" in str(error.value)


@pytest.mark.slow
def test_bad_redis_url_stops_the_process_without_printing_the_password() -> None:
    result = _manage("check", env={**PRODUCTION_ENV, "REDIS_URL": "http://:hunter2-secret@cache:6379/0"})
    assert result.returncode != 0
    assert (
        "REDIS_URL='http://:***@cache:6379/0': expected a redis://, rediss:// or unix:// URL."
        in result.stderr
    )
    assert "hunter2-secret" not in result.stderr + result.stdout


@pytest.mark.slow
def test_unsubscribe_links_signed_before_a_key_rotation_keep_working_with_the_old_key_as_fallback() -> None:
    # given a link signed by a process running on the old key
    old = {**PRODUCTION_ENV, "DJANGO_SECRET_KEY": "old-" + "k" * 60}
    sign = "from nurture.mail.transport import unsubscribe_token; print(unsubscribe_token(lead_id=7))"
    token = _manage("shell", "-v", "0", "-c", sign, env=old).stdout.strip()
    # when the key is rotated: a new DJANGO_SECRET_KEY, the old one in DJANGO_SECRET_KEY_FALLBACKS
    read = (
        "from django.core.signing import BadSignature; from nurture.mail.transport import lead_id_from_token\n"
        f"try: print(lead_id_from_token(token={token!r}))\n"
        "except BadSignature: print('refused')"
    )
    new = {**PRODUCTION_ENV, "DJANGO_SECRET_KEY": "new-" + "k" * 60}
    rotated = _manage(
        "shell",
        "-v",
        "0",
        "-c",
        read,
        env={**new, "DJANGO_SECRET_KEY_FALLBACKS": "older-one, " + old["DJANGO_SECRET_KEY"]},
    )
    # then the old link still opens, and only while the old key is among the fallbacks
    assert rotated.stdout.strip() == "7", rotated.stderr
    assert _manage("shell", "-v", "0", "-c", read, env=new).stdout.strip() == "refused"


@pytest.mark.slow
@pytest.mark.django_db
def test_metrics_outside_debug_need_the_bearer_token() -> None:
    # given a production process on the (migrated) test database
    from django.db import connection

    from config.env import database_url

    env = {
        **PRODUCTION_ENV,
        "DJANGO_ALLOWED_HOSTS": "testserver",
        "DJANGO_SECURE_SSL_REDIRECT": "0",
        "DATABASE_URL": database_url(connection.settings_dict),
    }
    script = (
        "from django.test import Client; c = Client(); "
        "print(c.get('/metrics').status_code, "
        "c.get('/metrics', HTTP_AUTHORIZATION='Bearer wrong').status_code, "
        "c.get('/metrics', HTTP_AUTHORIZATION='Bearer scrape-token').status_code)"
    )
    # when Prometheus scrapes without, with a wrong and with the configured token
    result = _manage("shell", "-v", "0", "-c", script, env=env)
    # then only the scrape with the token gets the figures
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["401", "401", "200"]


@pytest.mark.slow
def test_event_retention_shorter_than_the_metrics_window_is_refused() -> None:
    # the dashboard's window figures read OutreachEvent: pruning inside the window would falsify them
    env = {**PRODUCTION_ENV, "METRICS_WINDOW_S": "172800", "RETENTION_EVENTS_DAYS": "1"}
    result = _manage("check", env=env)
    assert result.returncode != 0
    assert "RETENTION_EVENTS_DAYS=1: must cover METRICS_WINDOW_S (172800 s = 2 days)" in result.stderr


@pytest.mark.slow
def test_retention_settings_defaults_and_validation() -> None:
    names = ("RETENTION_EVENTS_DAYS", "RETENTION_DEAD_LETTERS_DAYS", "RETENTION_ASSIGNMENT_ITEMS_DAYS")
    assert _settings_line(*names, "RETENTION_BATCH_ROWS", env=PRODUCTION_ENV) == [
        "90.0",
        "30.0",
        "30.0",
        "5000",
    ]
    result = _manage("check", env={**PRODUCTION_ENV, "RETENTION_BATCH_ROWS": "0"})
    assert "RETENTION_BATCH_ROWS='0': must be at least 1." in result.stderr


@pytest.mark.slow
def test_rabbitmq_queues_are_classic_by_default_and_quorum_on_request() -> None:
    # given RabbitMQ as the broker
    script = (
        "from django.conf import settings; "
        "print(sorted({str(q.queue_arguments) for q in settings.CELERY_TASK_QUEUES}))"
    )
    amqp = {**PRODUCTION_ENV, "CELERY_BROKER_URL": "amqp://guest:guest@127.0.0.1:5672//"}
    # then the product's queues are classic unless quorum queues are asked for
    assert _manage("shell", "-v", "0", "-c", script, env=amqp).stdout.strip() == "['None']"
    quorum = _manage("shell", "-v", "0", "-c", script, env={**amqp, "CELERY_QUEUE_TYPE": "quorum"})
    assert quorum.stdout.strip() == "[\"{'x-queue-type': 'quorum'}\"]"
    # and a Redis broker has no such thing, whatever the setting says
    redis_broker = _manage(
        "shell", "-v", "0", "-c", script, env={**PRODUCTION_ENV, "CELERY_QUEUE_TYPE": "quorum"}
    )
    assert redis_broker.stdout.strip() == "['None']"
    bad = _manage("check", env={**amqp, "CELERY_QUEUE_TYPE": "mirrored"})
    assert "CELERY_QUEUE_TYPE" in bad.stderr


@pytest.mark.slow
def test_a_step_model_naming_no_deployment_stops_start_up_saying_so() -> None:
    deployments = '[{"name": "small", "model": "m", "rpm": 600, "tpm": 600000}]'
    env = {**PRODUCTION_ENV, "LLM_DEPLOYMENTS": deployments, "LLM_STEP_MODELS": "message=large"}

    result = _manage("check", env=env)

    assert result.returncode != 0
    assert "LLM_STEP_MODELS: 'message=large': no deployment named 'large'" in result.stderr


@pytest.mark.slow
def test_inbound_reply_domain_defaults_for_the_demo_is_lower_cased_and_a_bad_one_names_the_variable() -> None:
    # the demo's default (a reserved name that never receives mail), and a set value lower-cased
    assert _settings_line("INBOUND_REPLY_DOMAIN", env={"DJANGO_DEBUG": "1"}) == ["reply.localhost"]
    set_value = {"DJANGO_DEBUG": "1", "INBOUND_REPLY_DOMAIN": "Reply.Outreach.Example.COM"}
    assert _settings_line("INBOUND_REPLY_DOMAIN", env=set_value) == ["reply.outreach.example.com"]
    # a value that is no mail domain stops the process naming it
    bad = _manage("check", env={"DJANGO_DEBUG": "1", "INBOUND_REPLY_DOMAIN": "reply@example.com"})
    assert bad.returncode != 0
    assert "INBOUND_REPLY_DOMAIN='reply@example.com': expected a mail domain" in bad.stderr
