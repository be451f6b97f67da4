"""Fixtures shared by the end-to-end tests."""
from __future__ import annotations

import pytest

import pushstack as stack


@pytest.fixture()
def slow_apple():
    """Every push answered after 400 ms, so a 10,000-token request or campaign takes seconds."""
    stack.simulator_admin("/admin/faults", "PUT", {"latency": {"distribution": "uniform", "min_ms": 400, "max_ms": 400}})
    yield
    stack.simulator_admin("/admin/faults", "PUT", {})
