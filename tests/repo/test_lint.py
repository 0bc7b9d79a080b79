"""The repository is ruff clean: ``ruff check .`` and ``ruff format --check .`` (the Python
blocks of the Markdown pages included) find nothing, with the ruff the ``[dev]`` extra pins,
so that the test command is also the lint gate. Skipped where ruff is not installed."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _ruff() -> list[str]:
    """The ruff of this environment (beside its Python first, then on PATH)."""
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.exists() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' installs it)")
    return [found]


LINTS = {"check": ["check", "."], "format": ["format", "--check", "."]}


@pytest.mark.parametrize("args", LINTS.values(), ids=LINTS.keys())
def test_ruff_finds_nothing(args: list[str]) -> None:
    done = subprocess.run(
        _ruff() + args, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"ruff {' '.join(args)}:\n{done.stdout}{done.stderr}"
