"""Celery reads Django's settings once, into a dict (config.celery.App.prepare_config): every
setting resolves as it does read live from Django's settings."""

from __future__ import annotations

from celery import Celery
from celery.app.defaults import DEFAULTS
from django.conf import settings

from config.celery import app


def test_every_celery_setting_resolves_as_read_live_from_djangos_settings() -> None:
    live = Celery("live")
    live.config_from_object("django.conf:settings", namespace="CELERY")
    assert {key: app.conf.get(key) for key in DEFAULTS} == {key: live.conf.get(key) for key in DEFAULTS}
    # and the project's own settings are among them, by their Celery names
    assert app.conf.task_acks_late is settings.CELERY_TASK_ACKS_LATE is True
    assert app.conf.worker_consumer == settings.CELERY_WORKER_CONSUMER
    assert app.conf.broker_url == settings.CELERY_BROKER_URL


def test_a_lookup_reads_the_copy_not_djangos_settings() -> None:
    assert app.conf.task_acks_late is True  # loads the configuration, if nothing did yet
    loaded = app.conf.defaults  # what Celery loaded, then its own defaults
    assert loaded is not None
    source = loaded[0]
    assert type(source) is dict
    assert source["CELERY_TASK_ACKS_LATE"] is True
