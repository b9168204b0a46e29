from __future__ import annotations

from django.apps import AppConfig


class OrchestratorConfig(AppConfig):
    name = "orchestrator"
