"""Shared fixtures of the data tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def no_proxy(monkeypatch):
    # A proxy configured on the machine must not intercept the local server (the cli
    # fixture's subprocesses inherit this environment).
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
