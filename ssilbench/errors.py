"""Errors a user can cause. The CLI prints their message (no traceback) and exits with 2."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class SsilbenchError(Exception):
    """Base class of every error caused by user input; the message says what to do."""

    exit_code = 2


class UsageError(SsilbenchError):
    """A flag, option or value the user gave is malformed or out of range."""


class UnknownNameError(SsilbenchError):
    """A method, environment, task, option or architecture name that does not exist."""


class PluginError(SsilbenchError):
    """A plugin failed to load, or two plugins claim the same name."""


class ConfigError(SsilbenchError):
    """A method config or environment option failed validation."""


class DatasetError(SsilbenchError):
    """A stored dataset is missing, corrupted or does not match its manifest."""

    def __init__(self, message: str, root: object = None) -> None:
        super().__init__(message)
        self.root = root  # the dataset folder, so a caller can offer to rebuild it


class ResultsStoreError(SsilbenchError):
    """The results directory cannot be created, written or read."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ' Did you mean 'x'?' suffix for the closest choice, or '' when none is close."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""


def unknown(kind: str, name: str, choices: Iterable[str], hint: str = "") -> UnknownNameError:
    """An UnknownNameError listing the valid choices and the closest match."""
    choices = sorted(choices)
    listing = ", ".join(choices) if choices else "(none registered)"
    return UnknownNameError(
        f"Unknown {kind} '{name}'.{did_you_mean(name, choices)} Available: {listing}.{hint}"
    )
