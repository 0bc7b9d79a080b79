"""Errors a user can cause. The CLI prints their message (no traceback) and exits with 2."""

from __future__ import annotations

import difflib
import errno
import re
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


class OutputError(SsilbenchError):
    """An output file or folder (a figure, a report, an export) cannot be written."""


class PreflightError(SsilbenchError):
    """Several things a sweep needs are missing or wrong (datasets, extras, simulators, label
    budgets): found together before anything runs, and reported in one message. ``problems``
    holds each one's own error, so a caller (or a test) can tell them apart."""

    def __init__(self, message: str, problems: list[SsilbenchError]) -> None:
        super().__init__(message)
        self.problems = problems


# What an OS error on a user's path means, in the words the messages use.
_CAUSES = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "not a folder (a file is in the way)",
    errno.EEXIST: "a file is in the way",
    errno.EISDIR: "is a folder",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOENT: "no such folder (it cannot be made there)",
    errno.ENAMETOOLONG: "name too long",
}
_HINTS = {"disk full": " Free some space or choose another folder."}
# torch reports a write cut short (a full disk) in its own words: "file write failed", or,
# when the archive's end no longer matches what it meant to write, "unexpected pos N vs M".
DISK_FULL_TEXTS = ("No space left on device", "file write failed", "unexpected pos")


def os_error_cause(exc: BaseException) -> str:
    """Why an OS error (or torch's wrapped write error) happened: 'disk full', ..."""
    code = getattr(exc, "errno", None)
    if code in _CAUSES:
        return _CAUSES[code]
    text = str(exc)
    if any(marker in text for marker in DISK_FULL_TEXTS):
        return "disk full"
    lines = text.strip().splitlines()
    return getattr(exc, "strerror", None) or (lines[-1] if lines else type(exc).__name__)


def os_error_message(path: object, exc: BaseException, action: str = "write") -> str:
    """One line for the user: 'Cannot write PATH: CAUSE.' plus what to do where known."""
    cause = os_error_cause(exc)
    where = getattr(exc, "filename", None)
    at = f" (at {where})" if where and str(where) != str(path) else ""
    return f"Cannot {action} {path}: {cause}{at}.{_HINTS.get(cause, '')}"


def safe_file_name(name: str, fallback: str = "unnamed") -> str:
    """``name`` as one file name that stays in its folder: letters, digits, '_', '+' and '-'
    only (no separator, no dot, so no '..', no control character), at most 100 long."""
    cleaned = re.sub(r"[^A-Za-z0-9_+-]+", "_", name).strip("_")[:100]
    return cleaned or fallback


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
