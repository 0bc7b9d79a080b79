"""The checks an importer (``Environment.import_dataset``) opens with, worded alike for every
environment: the folder ``--from`` names, and the datasets already imported."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ssilbench.errors import UsageError


def import_source(source: Path | str, holds: str) -> Path:
    """``source`` as a Path, or a UsageError when it is not a folder, saying what it should
    hold: ``--from SOURCE: no such folder. Give the folder that holds HOLDS``."""
    source = Path(source)
    if not source.is_dir():
        raise UsageError(f"--from {source}: no such folder. Give the folder that holds {holds}")
    return source


def already_imported(target: Path, replace: bool, log: Callable[[str], None], what: str) -> bool:
    """Whether to leave ``target`` as it is: it exists and ``replace`` is off. The log then
    says ``WHAT already imported at TARGET (--replace to import it again)``."""
    if target.exists() and not replace:
        log(f"{what} already imported at {target} (--replace to import it again)")
        return True
    return False
