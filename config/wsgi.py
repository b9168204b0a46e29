"""The web process's WSGI application (gunicorn config.wsgi, and runserver through WSGI_APPLICATION)."""

from __future__ import annotations

import os

import django
from django.core.handlers.wsgi import WSGIHandler

from config.tracing import tracing_setup

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# get_wsgi_application() in two steps, with tracing between them: the apps (and so the Celery
# tasks the web publishes) are loaded, the middleware not yet, so Django's tracing middleware is
# in the handler's chain. Off unless OTEL_EXPORTER_OTLP_ENDPOINT is set (config.tracing).
django.setup(set_prefix=False)
tracing_setup(process="web")
application = WSGIHandler()
