from __future__ import annotations

from django.apps import AppConfig


class OrchestratorConfig(AppConfig):
    name = "orchestrator"

    def ready(self) -> None:
        from orchestrator import checks  # noqa: F401  (registers the system checks)
