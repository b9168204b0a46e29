from __future__ import annotations

from django.apps import AppConfig


class NurtureConfig(AppConfig):
    name = "nurture"
