"""The security suite reuses the pipeline's real-network fixtures (a scripted LLM over HTTP, an SMTP sink)."""

from __future__ import annotations

from tests.nurture.conftest import llm_stub, smtp_sink

__all__ = ["llm_stub", "smtp_sink"]
