"""Django settings, read from the environment through config/env.py (one reader).

Defaults are the demo's embedded defaults (SQLite file, Redis on localhost). With
DJANGO_DEBUG off (the default), secrets have no default and must come from the environment.
"""

from __future__ import annotations

import os
import re
import secrets
import sys
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from config.deployments import deployments_parse, fallbacks_parse, step_models_parse
from config.env import (
    REQUIRED,
    database_from_url,
    env_bool,
    env_bool_if_set,
    env_choice,
    env_float,
    env_int,
    env_int_if_set,
    env_ints,
    env_list,
    env_prefixed,
    env_prices,
    env_redis_url,
    env_shares,
    env_str,
    env_url,
)
from config.logging import logging_config
from config.queues import TASK_ROUTES, Queue, task_queues
from config.workers import WORKERS

BASE_DIR = Path(__file__).resolve().parent.parent
# A `.env` file beside manage.py (or DJANGO_ENV_FILE) is read when present, for every process
# (web, workers, beat, commands); variables already set in the environment win.
load_dotenv(os.environ.get("DJANGO_ENV_FILE") or BASE_DIR / ".env", override=False)

# `manage.py collectstatic` (run when the image is built, Dockerfile) reads no secret and needs
# no service, so the build is given none: that command alone fills the required secrets it finds
# unset with throwaway values (the secret key random on every run). Every other command and
# every process (web, workers, beat) still refuses to start without them.
if Path(sys.argv[0]).name == "manage.py" and sys.argv[1:2] == ["collectstatic"]:
    for _name, _value in {
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "LLM_API_KEY": "unused-by-collectstatic",
        "WEBHOOK_SECRET": "unused-by-collectstatic",
        "FLOWER_BASIC_AUTH": "unused:unused-by-collectstatic",
        "PUBLIC_BASE_URL": "https://collectstatic.invalid",
        "DEFAULT_FROM_EMAIL": "collectstatic@collectstatic.invalid",
        "METRICS_TOKEN": "unused-by-collectstatic",
    }.items():
        os.environ.setdefault(_name, _value)

DEBUG = env_bool("DJANGO_DEBUG", False)
# Production secrets have no default: only a debug (demo/dev) process may run on a throwaway key.
SECRET_KEY = env_str("DJANGO_SECRET_KEY", "dev-insecure-key-for-demo-only" if DEBUG else REQUIRED)
# Key rotation: the previous keys, comma-separated. Nothing is signed with them, but what they
# signed still verifies (Django's Signer tries SECRET_KEY, then these): unsubscribe links in
# emails already sent keep working, sessions survive. Drop an old key once its links may go.
SECRET_KEY_FALLBACKS = env_list("DJANGO_SECRET_KEY_FALLBACKS", "")
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]" if DEBUG else "")

INSTALLED_APPS = [
    "backoffice.apps.BackofficeAdminConfig",  # django.contrib.admin on the product's site
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_celery_beat",
    "anymail",  # email providers' backends and webhooks (docs/email.md)
    "outreach",
    "nurture",
    "orchestrator",
    "backoffice",  # the admin layer on top: every ModelAdmin and the dashboard
    "devtools",  # llm_sim: the provider simulator (demo, benchmarks, tests)
    "demo",  # the one-command demo
]

MIDDLEWARE = [
    "config.health.HealthCheckMiddleware",  # first: probes skip the host check and the HTTPS redirect
    "django.middleware.security.SecurityMiddleware",
    # Static files (the admin's CSS and JS) straight from the web process, compressed and
    # cached for ever under hashed names: no separate file server in front of gunicorn.
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# PostgreSQL in production and tests; a SQLite file is the demo's embedded default.
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'var' / 'demo.sqlite3'}")
# Connections: CONN_MAX_AGE is 60 s (database_from_url) for web requests. In Celery workers it
# does not apply: Celery's Django fixup closes a task's connections when the task starts and
# ends, so every threads-pool worker keeps its connections in a pool instead (config.celery).
# A generation job connects only for its reads and writes, gives the connection back before
# its LLM calls, and waits for one of GENERATION_DB_CONNECTIONS turns per process
# (nurture.writing.generation). PostgreSQL's max_connections must cover web + beat + the prefork
# workers' processes + GENERATION_DB_CONNECTIONS per generation process + the send and reply
# workers' threads (a send holds its connection while it runs: 48, config.workers): the sum is
# config.workers.database_connections_peak (README "Deploy": how to size max_connections).
DATABASES = {"default": database_from_url("DATABASE_URL", DATABASE_URL)}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("DJANGO_STATIC_ROOT", str(BASE_DIR / "var" / "static")))
# Outside debug the admin's files come from `collectstatic` (run when the image is built, with
# no secret: see the top of this file) under content-hashed names; in debug Django serves them
# from the apps. A platform that builds from the Procfile alone runs it in its build step.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Security: on by default outside debug; `check --deploy` passes with production env set.
CSRF_COOKIE_SECURE = not DEBUG
SESSION_COOKIE_SECURE = not DEBUG
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", not DEBUG)
# Plain-HTTP machine-to-machine calls are answered, not redirected: an email provider's or our
# own webhook sender and a Prometheus scrape do not follow a 301 (health probes: config/health.py).
SECURE_REDIRECT_EXEMPT = [r"^hooks/", r"^metrics$"]
# Trust X-Forwarded-Proto only behind a TLS-terminating proxy that sets it (and strips it from
# clients): trusted without such a proxy, any client could claim to be on HTTPS.
if env_bool("DJANGO_SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_HSTS_SECONDS = 0 if DEBUG else env_int("DJANGO_HSTS_SECONDS", 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = not DEBUG
SECURE_HSTS_PRELOAD = not DEBUG
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# --- Redis: the LLM budget, the dispatcher lock, and the Celery broker by default -----------
REDIS_URL = env_redis_url("REDIS_URL", "redis://127.0.0.1:6379/0")
# The LLM budget's own Redis: REDIS_URL by default, or a Redis Cluster (redis+cluster://host:port,
# one node; the others are discovered). The dispatcher lock, in-flight counts, cursor and broker
# stay on REDIS_URL.
BUDGET_REDIS_URL = env_redis_url("BUDGET_REDIS_URL", REDIS_URL, cluster=True)

# --- LLM provider (any OpenAI-compatible chat-completions endpoint) -------------------------
LLM_BASE_URL = env_str("LLM_BASE_URL", "http://127.0.0.1:8900/v1")
LLM_API_KEY = env_str("LLM_API_KEY", "sk-demo" if DEBUG else REQUIRED)
LLM_MODEL = env_str("LLM_MODEL", "sim-1")
LLM_RPM = env_int("LLM_RPM", 300, minimum=1)  # provider requests/min on the shared key
LLM_TPM = env_int("LLM_TPM", 300_000, minimum=1)  # provider tokens/min on the shared key
LLM_TIMEOUT_S = env_float("LLM_TIMEOUT_S", 30.0, minimum=1.0)
# Dollars per 1,000 input / output tokens per model, e.g. "gpt-4o-mini=0.00015/0.0006": each
# written outreach records its cost (a model without a price costs 0). docs/spend.md.
LLM_PRICES = env_prices("LLM_PRICES")
# HTTP connections to the provider per process (one client shared by a worker's threads): as
# many as the generation worker runs jobs, or calls would queue for a connection.
LLM_MAX_CONNECTIONS = env_int("LLM_MAX_CONNECTIONS", WORKERS[Queue.GENERATION].concurrency, minimum=1)
LLM_CALLS_PER_OUTREACH = 3  # plan -> context -> message
# Several models and deployments (config/deployments.py, docs/architecture.md). Absent, the one
# deployment above (LLM_MODEL, LLM_RPM, LLM_TPM) is the only one, its budget scope "provider".
_LLM_DEPLOYMENTS_RAW = env_str("LLM_DEPLOYMENTS", "")
LLM_DEPLOYMENTS = deployments_parse(_LLM_DEPLOYMENTS_RAW) if _LLM_DEPLOYMENTS_RAW else ()
_LLM_NAMES = [d.name for d in LLM_DEPLOYMENTS] or [LLM_MODEL]
LLM_STEP_MODELS = step_models_parse(env_str("LLM_STEP_MODELS", ""), names=_LLM_NAMES)
LLM_FALLBACKS = fallbacks_parse(env_str("LLM_FALLBACKS", ""), names=_LLM_NAMES)
# A name out of room this long (all its deployments) runs its steps on its fallback meanwhile.
LLM_FALLBACK_AFTER_S = env_float("LLM_FALLBACK_AFTER_S", 30.0, minimum=0.0)
# A deployment answering 401/403/404 this many calls in a row is misconfigured: its breaker
# opens (work waits QUEUED, nothing dead-lettered); one probe job tries it every LLM_FAULT_PROBE_S.
LLM_FAULT_THRESHOLD = env_int("LLM_FAULT_THRESHOLD", 3, minimum=1)
LLM_FAULT_PROBE_S = env_float("LLM_FAULT_PROBE_S", 30.0, minimum=1.0)
LLM_EST_TOKENS_PER_CALL = env_int("LLM_EST_TOKENS_PER_CALL", 600, minimum=1)
# Budget shape (docs/budget.md). Paced (the default): the buckets refill at the pacer's rate and
# every call is paced against a log of the provider's window, which reaches ~98% of the limit.
# Strict: the buckets alone can never exceed any 60 s window (~96%), for clients that do not pace.
LLM_BUDGET_STRICT = env_bool("LLM_BUDGET_STRICT", False)
# The pacer's margin past the provider's 60 s is the measured spread of call delays plus
# LLM_BUDGET_MARGIN_FLOOR_MS, at most LLM_BUDGET_MARGIN_MS (also the margin until measured).
# Set the floor to the cap for a fixed margin.
LLM_BUDGET_MARGIN_MS = env_int("LLM_BUDGET_MARGIN_MS", 1000, minimum=0)
LLM_BUDGET_MARGIN_FLOOR_MS = env_int("LLM_BUDGET_MARGIN_FLOOR_MS", 100, minimum=0)
# Redis unreachable: "open" lets work run unmetered (the limiter protects the provider, not
# our users), "closed" stops dispatching LLM work until Redis is back. See README.
BUDGET_FAILURE_POLICY = env_choice("BUDGET_FAILURE_POLICY", ["open", "closed"], "open")

# --- Email ----------------------------------------------------------------------------------
# SMTP (the EMAIL_* settings below) unless EMAIL_BACKEND names a django-anymail provider's
# backend, e.g. anymail.backends.mailgun.EmailBackend, configured by ANYMAIL_* (next section).
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
if not EMAIL_BACKEND.startswith(("django.core.mail.backends.", "anymail.backends.")):
    raise ImproperlyConfigured(
        f"EMAIL_BACKEND={EMAIL_BACKEND!r}: expected django.core.mail.backends.smtp.EmailBackend (the "
        "default) or a django-anymail backend such as anymail.backends.mailgun.EmailBackend."
    )
EMAIL_HOST = env_str("EMAIL_HOST", "127.0.0.1")
EMAIL_PORT = env_int("EMAIL_PORT", 1025, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
# An SMTP login never goes out in clear by default: with a user and password set, STARTTLS is
# on unless EMAIL_USE_TLS or EMAIL_USE_SSL (implicit TLS, port 465) says otherwise. Turning both
# off with a login needs EMAIL_ALLOW_PLAINTEXT_AUTH=1, and every start then warns (orchestrator.W002).
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
_EMAIL_LOGIN = bool(EMAIL_HOST_USER and EMAIL_HOST_PASSWORD)  # Django's backend logs in only with both
_email_use_tls = env_bool_if_set("EMAIL_USE_TLS")
EMAIL_USE_TLS = (_EMAIL_LOGIN and not EMAIL_USE_SSL) if _email_use_tls is None else _email_use_tls
EMAIL_ALLOW_PLAINTEXT_AUTH = env_bool("EMAIL_ALLOW_PLAINTEXT_AUTH", False)
if EMAIL_USE_TLS and EMAIL_USE_SSL:
    raise ImproperlyConfigured(
        "EMAIL_USE_TLS and EMAIL_USE_SSL are both on: choose STARTTLS or implicit TLS."
    )
if _EMAIL_LOGIN and not (EMAIL_USE_TLS or EMAIL_USE_SSL or EMAIL_ALLOW_PLAINTEXT_AUTH):
    raise ImproperlyConfigured(
        "EMAIL_USE_TLS=0 with EMAIL_HOST_USER/EMAIL_HOST_PASSWORD set would send the SMTP password "
        "in clear: use EMAIL_USE_TLS=1 or EMAIL_USE_SSL=1, or set EMAIL_ALLOW_PLAINTEXT_AUTH=1 to accept it."
    )
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 20, minimum=1)
# No production defaults: a demo sender or a localhost unsubscribe link would reach real people.
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "outreach@example.com" if DEBUG else REQUIRED)
# Where recipients reach us (List-Unsubscribe links): the public address of the web service.
PUBLIC_BASE_URL = env_str("PUBLIC_BASE_URL", "http://127.0.0.1:8000" if DEBUG else REQUIRED)

# Every email's Reply-To is the conversation's own address, reply+<random token>@this domain,
# as GitHub's notification replies do (docs/email.md, "Which inbound is believed"): route the
# domain's MX to the email provider whose inbound webhook posts to /hooks/anymail/<esp>/inbound/.
# Unset outside debug: no Reply-To, replies reach the From address, and provider inbound finds
# its conversation by In-Reply-To / References alone. The demo's default is a reserved name
# (RFC 6761) that never receives mail: its replies come through the signed webhook.
INBOUND_REPLY_DOMAIN = env_str("INBOUND_REPLY_DOMAIN", "reply.localhost" if DEBUG else "").strip().lower()
if INBOUND_REPLY_DOMAIN and not re.fullmatch(
    r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9-]{2,63}", INBOUND_REPLY_DOMAIN
):
    raise ImproperlyConfigured(
        f"INBOUND_REPLY_DOMAIN={INBOUND_REPLY_DOMAIN!r}: expected a mail domain such as reply.outreach.example.com."
    )

# --- Email providers (django-anymail): sending, inbound replies, and later tracking ---------
# Every ANYMAIL_<NAME> variable becomes ANYMAIL["<NAME>"] (anymail's own setting names; JSON
# when the value starts with { or [), e.g. ANYMAIL_MAILGUN_API_KEY, ANYMAIL_MAILGUN_SENDER_DOMAIN,
# ANYMAIL_MAILGUN_WEBHOOK_SIGNING_KEY, ANYMAIL_POSTMARK_SERVER_TOKEN. ANYMAIL_WEBHOOK_SECRET
# ("user:password", HTTP basic auth on every provider webhook) is what mounts the webhooks at
# /hooks/anymail/ (config/urls.py): without it they do not exist. Receivers: nurture/apps.py.
ANYMAIL = env_prefixed("ANYMAIL_")

# The mail provider's limits (docs/architecture.md, "Send budget"): every email reserves one
# message of the account's rate and of its sender domain's UTC day right before SMTP; one
# that must wait goes back to APPROVED saying why. None set: no send budget (sends as fast as
# the send workers go). Rates are kept strictly (never more in any second / minute), which
# runs at limit - 1 per window; each needs 2 or more.
EMAIL_RATE_PER_SECOND = env_int_if_set("EMAIL_RATE_PER_SECOND", minimum=2)
EMAIL_RATE_PER_MINUTE = env_int_if_set("EMAIL_RATE_PER_MINUTE", minimum=2)
# The rate's window is widened by this much: the spread of the delay from reserving a send to
# the provider receiving it (claim, SMTP session). 20/s runs at 15.8/s with 200 ms, 18.98/s with 0.
EMAIL_RATE_MARGIN_MS = env_int("EMAIL_RATE_MARGIN_MS", 200, minimum=0)
# Messages per UTC day per sender domain (the From address's domain), and the warm-up ramp: the
# caps of a domain's first send days ("50,100,200,400"; after it, EMAIL_DOMAIN_DAILY_LIMIT).
EMAIL_DOMAIN_DAILY_LIMIT = env_int_if_set("EMAIL_DOMAIN_DAILY_LIMIT", minimum=1)
EMAIL_WARMUP = env_ints("EMAIL_WARMUP", minimum=1)

# --- Dispatcher -----------------------------------------------------------------------------
# Whole seconds between cycles: django-celery-beat stores intervals in whole seconds, so 0.5
# would silently become 0; refused here instead.
DISPATCH_INTERVAL = env_int("DISPATCH_INTERVAL", 2, minimum=1)
# LLM work in flight is sized each cycle by Little's law (orchestrator/dispatch/inflight.py,
# docs/dispatch.md): budget rate x observed job latency x (1 + headroom). The maximum only caps
# it: 1000 does not bind at 3,000 RPM with 3 s calls (~16 outreach/s x ~22 s at p95 with
# sigma 0.5, x 1.2 = ~440); lower it to bound the broker backlog of a small worker pool.
DISPATCH_MAX_IN_FLIGHT = env_int("DISPATCH_MAX_IN_FLIGHT", 1000, minimum=1)
# Per-call latency assumed for a step until it has 5 observed calls (a cold start).
DISPATCH_COLD_CALL_LATENCY_S = env_float("DISPATCH_COLD_CALL_LATENCY_S", 5.0, minimum=0.01)
# Share added to the Little's-law target: in-flight counts spread around rate x mean time.
DISPATCH_IN_FLIGHT_HEADROOM = env_float("DISPATCH_IN_FLIGHT_HEADROOM", 0.2, minimum=0.0)
# Starvation guard for lower tiers, off by default: e.g. "intro=0.1,nudge=0.05" reserves at least
# that share of each cycle's slots for the tier while it has work (replies keep the rest first).
DISPATCH_MIN_SHARE = env_shares("DISPATCH_MIN_SHARE", keys=["intro", "nudge"])
DISPATCH_STUCK_AFTER_S = env_int("DISPATCH_STUCK_AFTER_S", 600, minimum=1)
# How owners share the LLM budget: "tokens" (each pick charged what the owner's jobs cost, a
# moving average of their settled tokens: equal weights get equal tokens) or "count" (equal
# emails, the behaviour before). Reservations use the learned cost either way (docs/dispatch.md).
DISPATCH_FAIRNESS = env_choice("DISPATCH_FAIRNESS", ["tokens", "count"], "tokens")
# A generation job's lease (orchestrator.failures.leases): a key with this TTL, re-set by its worker
# process every RENEW seconds. A GENERATING row older than the TTL whose lease is gone has lost
# its worker and is recovered at once. RENEW at most half the TTL: one missed beat (a slow
# Redis round trip) must not expire a live job's lease.
GENERATION_LEASE_TTL_S = env_float("GENERATION_LEASE_TTL_S", 30.0, minimum=1.0)
GENERATION_LEASE_RENEW_S = env_float(
    "GENERATION_LEASE_RENEW_S", GENERATION_LEASE_TTL_S / 3, minimum=0.1, maximum=GENERATION_LEASE_TTL_S / 2
)
# PostgreSQL connections one generation process uses at most at once (its jobs take turns for
# their short reads and writes; none holds a connection during its LLM calls).
GENERATION_DB_CONNECTIONS = env_int("GENERATION_DB_CONNECTIONS", 8, minimum=1)
RETRY_MAX_ATTEMPTS = env_int("RETRY_MAX_ATTEMPTS", 5, minimum=1)
# Transient failures wait base * 2^(attempt-1) seconds (x U(0.5, 1) jitter), capped at 15 min.
RETRY_BACKOFF_BASE_S = env_float("RETRY_BACKOFF_BASE_S", 15.0, minimum=0.0)
# Re-queues of one job after the provider's 429 before the next 429 dead-letters it ("the
# provider kept refusing"). Each waits Retry-After and the budget holds every call meanwhile,
# so one job sees a 429 only when it is the probe: 100 is an outage of hours, not a busy minute.
RETRY_MAX_RATE_LIMITED = env_int("RETRY_MAX_RATE_LIMITED", 100, minimum=1)

# --- Inbound webhook ------------------------------------------------------------------------
WEBHOOK_SECRET = env_str("WEBHOOK_SECRET", "demo-webhook-secret" if DEBUG else REQUIRED)
# One answer per burst (nurture.quiet, docs/dispatch.md): a lead's reply is answered once they
# have been quiet this many seconds since their last message; later messages join the pending
# answer and push it out. 0 answers at once. An organization may set its own (reply_quiet_s).
REPLY_QUIET_S = env_int("REPLY_QUIET_S", 60, minimum=0)
# Request bodies Django reads into memory. The email providers post an inbound reply whole,
# attachments base64-encoded inside (a reply with a PDF is several MB); Django's 2.5 MB default
# answered them 400, and the reply was lost. 32 MB takes a reply with tens of MB of email
# attached (base64 adds a third); only the text is kept, never attachments (docs/email.md).
DATA_UPLOAD_MAX_MEMORY_SIZE = 32 * 1024 * 1024

# --- Bounces and complaints (orchestrator.controls.deliverability; docs/email.md) ---------------------
# An owner or sender domain is paused when, over its last BOUNCE_WINDOW_SENDS delivery attempts
# (at least BOUNCE_MIN_SENDS of them), more than BOUNCE_RATE_MAX hard-bounced or more than
# COMPLAINT_RATE_MAX were reported as spam. Fractions of 1: 0.05 = 5 %, 0.003 = 0.3 %.
BOUNCE_RATE_MAX = env_float("BOUNCE_RATE_MAX", 0.05, minimum=0.0, maximum=1.0)
COMPLAINT_RATE_MAX = env_float("COMPLAINT_RATE_MAX", 0.003, minimum=0.0, maximum=1.0)
BOUNCE_WINDOW_SENDS = env_int("BOUNCE_WINDOW_SENDS", 200, minimum=1)
BOUNCE_MIN_SENDS = env_int("BOUNCE_MIN_SENDS", 20, minimum=1)

# --- Metrics and dashboard -----------------------------------------------------------------
# /metrics shows every organization's owners and the whole budget: outside debug a scrape
# needs `Authorization: Bearer <METRICS_TOKEN>`. Debug (demo, development): empty = open.
METRICS_TOKEN = env_str("METRICS_TOKEN", "" if DEBUG else REQUIRED)
METRICS_WINDOW_S = env_int("METRICS_WINDOW_S", 86_400, minimum=60)  # window of latency/rate figures
# The platform scrape's text is kept this long in Redis, shared by every web process and replica
# (orchestrator.metrics.prometheus.platform_exposition); 0 renders each scrape afresh.
METRICS_CACHE_S = env_float("METRICS_CACHE_S", 5.0, minimum=0.0, maximum=60.0)
BUDGET_SAMPLE_RETENTION_DAYS = env_int("BUDGET_SAMPLE_RETENTION_DAYS", 7, minimum=1)
DASHBOARD_REFRESH_S = env_int(
    "DASHBOARD_REFRESH_S", 15, minimum=1
)  # the queue-health page refetches its figures

# --- Alerts (orchestrator.metrics.alerts: a beat task checks the conditions, a webhook tells people) ---
# Slack-compatible incoming webhook (POST {"text": ...}); empty = alerts are logged only.
ALERT_WEBHOOK_URL = env_str("ALERT_WEBHOOK_URL", "")
if ALERT_WEBHOOK_URL and not ALERT_WEBHOOK_URL.startswith(("https://", "http://")):
    raise ImproperlyConfigured(f"ALERT_WEBHOOK_URL={ALERT_WEBHOOK_URL!r}: expected an http(s):// URL.")
ALERT_INTERVAL_SECONDS = env_int("ALERT_INTERVAL_SECONDS", 3600, minimum=1)  # once per condition per interval
ALERT_CHECK_INTERVAL_S = env_int("ALERT_CHECK_INTERVAL_S", 60, minimum=1)  # how often beat checks
ALERT_DEAD_LETTERS_OPEN = env_int("ALERT_DEAD_LETTERS_OPEN", 10, minimum=0)  # alert above this many open
ALERT_DEAD_LETTER_AGE_S = env_int("ALERT_DEAD_LETTER_AGE_S", 86_400, minimum=1)  # oldest open waits past it
# Budget idle: work ready (and not deferred) this long while the LLM used under this share of the limit.
ALERT_IDLE_MINUTES = env_int("ALERT_IDLE_MINUTES", 10, minimum=1)
ALERT_IDLE_BUDGET_PERCENT = env_float("ALERT_IDLE_BUDGET_PERCENT", 20.0, minimum=0.0, maximum=100.0)

# --- Retention (orchestrator.controls.retention: a scheduled prune in bounded batches) ----------------
# Days of history kept (fractions allowed: a soak prunes minutes-old rows). The dashboard's window
# figures read the transition history, so it is kept for at least METRICS_WINDOW_S.
RETENTION_EVENTS_DAYS = env_float("RETENTION_EVENTS_DAYS", 90.0, minimum=0.0)
if RETENTION_EVENTS_DAYS * 86_400 < METRICS_WINDOW_S:
    raise ImproperlyConfigured(
        f"RETENTION_EVENTS_DAYS={RETENTION_EVENTS_DAYS:g}: must cover METRICS_WINDOW_S "
        f"({METRICS_WINDOW_S} s = {METRICS_WINDOW_S / 86_400:g} days): the dashboard reads that window."
    )
# Dead letters an operator resolved (replayed, cancelled); items of completed assignments.
RETENTION_DEAD_LETTERS_DAYS = env_float("RETENTION_DEAD_LETTERS_DAYS", 30.0, minimum=0.0)
RETENTION_ASSIGNMENT_ITEMS_DAYS = env_float("RETENTION_ASSIGNMENT_ITEMS_DAYS", 30.0, minimum=0.0)
# Unverified inbound email (held or accepted), counted from when it arrived.
RETENTION_UNVERIFIED_INBOUND_DAYS = env_float("RETENTION_UNVERIFIED_INBOUND_DAYS", 30.0, minimum=0.0)
# Rows per DELETE statement, each its own transaction: short locks, bounded WAL per commit.
RETENTION_BATCH_ROWS = env_int("RETENTION_BATCH_ROWS", 5000, minimum=1)
RETENTION_PRUNE_INTERVAL_S = env_int("RETENTION_PRUNE_INTERVAL_S", 86_400, minimum=1)  # daily
# Seconds between runs of draft expiry (orchestrator.controls.draft_expiry; the age is per organization, its
# draft_expiry_days): a draft may outlive its age by up to one interval.
DRAFT_EXPIRY_INTERVAL_S = env_int("DRAFT_EXPIRY_INTERVAL_S", 3600, minimum=1)  # hourly

# --- Flower ---------------------------------------------------------------------------------
FLOWER_BASIC_AUTH = env_str("FLOWER_BASIC_AUTH", "admin:admin" if DEBUG else REQUIRED)

# --- Celery ---------------------------------------------------------------------------------
# redis:// (the default: REDIS_URL) or amqp:// (RabbitMQ). The budget and locks stay on REDIS_URL.
CELERY_BROKER_URL = env_url("CELERY_BROKER_URL", REDIS_URL)
# Redis: kombu's transport with one redis-py client per pool (config.broker says why); else kombu's.
_REDIS_BROKER = CELERY_BROKER_URL.split("://", 1)[0] in ("redis", "rediss")
CELERY_BROKER_TRANSPORT = "config.broker:Transport" if _REDIS_BROKER else None
CELERY_RESULT_BACKEND = None  # tasks record outcomes in PostgreSQL; nobody reads results
CELERY_TASK_IGNORE_RESULT = True
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_TIMEZONE = "UTC"
CELERY_TASK_DEFAULT_QUEUE = Queue.ORCHESTRATOR
# RabbitMQ only: "quorum" queues (replicated, the choice for a clustered broker) or "classic".
# Choosing and migrating: README "Deploy"; what quorum changes: config.queues.task_queues.
CELERY_QUEUE_TYPE = env_choice("CELERY_QUEUE_TYPE", ["classic", "quorum"], "classic")
CELERY_TASK_QUEUES = task_queues(
    quorum=CELERY_QUEUE_TYPE == "quorum" and CELERY_BROKER_URL.startswith("amqp")
)
# Native delayed delivery (quorum only): a countdown waits in the broker's own quorum queues.
CELERY_BROKER_NATIVE_DELAYED_DELIVERY_QUEUE_TYPE = "quorum"
CELERY_TASK_ROUTES = TASK_ROUTES
CELERY_TASK_CREATE_MISSING_QUEUES = False
# A message is acknowledged after the task returns, and re-delivered if the worker dies:
# every task is idempotent by its guarded state transition, so a redelivery is harmless.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Redis re-delivers an unacknowledged message after visibility_timeout. Every time limit is
# well under it, so a slow-but-alive task is killed long before Redis would hand its message
# to a second worker (which would run it twice). Celery enforces the limits on the prefork
# workers only; on the threads pools each call's own timeout bounds a job (docs/reliability.md).
CELERY_BROKER_VISIBILITY_TIMEOUT_S = 3600
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_BROKER_VISIBILITY_TIMEOUT_S}
CELERY_TASK_SOFT_TIME_LIMIT = 240
# Seconds a stopping worker (SIGTERM: a deploy, a scale-down) lets its running jobs finish before
# its generation jobs hand back (config.shutdown: Celery's soft shutdown, ended early when the
# jobs are done). The platform's grace before SIGKILL must cover this + LLM_TIMEOUT_S + 10 s
# and a margin: docker-compose.yml's stop_grace_period is 120 s for the defaults. 0: no wait.
WORKER_SHUTDOWN_GRACE_S = env_float("WORKER_SHUTDOWN_GRACE_S", 60.0, minimum=0.0)
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT = WORKER_SHUTDOWN_GRACE_S
# Seconds between a worker's hand-backs of freed heap memory to the system (config.memory:
# glibc's malloc_trim; a threads-pool worker's RSS otherwise keeps its busiest minutes). 0: never.
WORKER_MALLOC_TRIM_S = env_float("WORKER_MALLOC_TRIM_S", 60.0, minimum=0.0)
CELERY_TASK_TIME_LIMIT = 300
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_WORKER_SEND_TASK_EVENTS = True  # Flower
# Task events go to the broker in batches, one message at most every 0.25 s per worker instead
# of nearly one per event (config.task_events says what that saved).
CELERY_WORKER_CONSUMER = "config.task_events:Consumer"
# No task-sent events: the dispatcher publishes hundreds of tasks a cycle and each sent event
# doubled the cost of a publish; Flower still sees received/started/succeeded from workers.
CELERY_TASK_SEND_SENT_EVENT = False
# django-celery-beat's DatabaseScheduler, touching a heartbeat file on every tick (liveness).
CELERY_BEAT_SCHEDULER = "config.beat:HeartbeatScheduler"
BEAT_HEARTBEAT_FILE = env_str("BEAT_HEARTBEAT_FILE", "/tmp/outreach-beat.heartbeat")
CELERY_BEAT_SCHEDULE = {
    "dispatch-cycle": {
        "task": "orchestrator.dispatch",
        "schedule": DISPATCH_INTERVAL,
        # A cycle message older than one interval is useless (the next one is coming): let it
        # expire rather than pile up behind a stopped orchestrator worker. `expire_seconds`, not
        # `expires`: django-celery-beat copies only the former into its table.
        "options": {"queue": Queue.ORCHESTRATOR.value, "expire_seconds": DISPATCH_INTERVAL},
    },
    # Alerts (orchestrator.metrics.alerts): each condition notifies at most once per ALERT_INTERVAL_SECONDS.
    # On the dead-letter queue: its webhook I/O never holds up a dispatch cycle.
    "alerts-check": {
        "task": "orchestrator.alerts_check",
        "schedule": ALERT_CHECK_INTERVAL_S,
        "options": {"queue": Queue.DEAD_LETTER.value, "expire_seconds": ALERT_CHECK_INTERVAL_S},
    },
    # Retention (orchestrator.controls.retention): the orchestrator queue is for short work, so one run
    # deletes for about one dispatch interval and queues its own continuation if rows remain.
    "retention-prune": {
        "task": "orchestrator.prune",
        "schedule": RETENTION_PRUNE_INTERVAL_S,
        "options": {"queue": Queue.ORCHESTRATOR.value, "expire_seconds": RETENTION_PRUNE_INTERVAL_S},
    },
    "drafts-expire": {
        "task": "orchestrator.expire_drafts",
        "schedule": DRAFT_EXPIRY_INTERVAL_S,
        "options": {"queue": Queue.ORCHESTRATOR.value, "expire_seconds": DRAFT_EXPIRY_INTERVAL_S},
    },
}

# Structured logs: JSON lines in production, key=value in debug; every line about an outreach
# carries its id, owner, tier and state (config.logging.outreach_log_context).
LOGGING = logging_config(
    level=env_str("LOG_LEVEL", "INFO"),
    json_lines=env_choice("LOG_FORMAT", ["json", "kv"], "kv" if DEBUG else "json") == "json",
)
