"""The lead most nurture tests answer or unsubscribe, defined once; a module says how its lead
differs by overriding `lead_history`."""

from __future__ import annotations

from typing import Any

import pytest

from outreach.models import Lead
from tests.factories import make_lead_with_history


@pytest.fixture
def lead_history() -> dict[str, Any]:
    """make_lead_with_history's keywords for `lead`: by default emailed twice, a nudge waiting."""
    return {"nudge_waiting": True}


@pytest.fixture
def lead(db: None, lead_history: dict[str, Any]) -> Lead:
    return make_lead_with_history(**lead_history)
