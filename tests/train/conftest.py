"""Shared fixtures of the training tests."""

from __future__ import annotations

import pytest

from ssilbench.train import leases


@pytest.fixture
def fast_leases(monkeypatch):
    """Leases that beat, go stale and are polled within a second, so that a test of a
    stale or held lease waits fractions of a second, not minutes."""
    monkeypatch.setattr(leases, "LEASE_HEARTBEAT_S", 0.05)
    monkeypatch.setattr(leases, "LEASE_STALE_S", 0.5)
    monkeypatch.setattr(leases, "LEASE_POLL_S", 0.02)
