"""OS errors on user paths become one clear message (exit 2, no traceback, no temp file
left, nothing claimed), and output file names built from user names cannot escape."""

from __future__ import annotations

import errno
import sqlite3
import sys
from pathlib import Path

import pytest

from ssilbench.cli import main

TINY = ["--method", "bc", "--env", "maze:10x10", "--budgets", "16", "--seeds", "0"]
TINY += ["--steps", "20", "-q"]


def cli(capsys, *args: str) -> tuple[int, str]:
    """Run the CLI in-process: (exit code, stdout + stderr)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out = capsys.readouterr()
    return code, out.out + out.err


def run(capsys, results: Path, data: Path, *extra: str) -> tuple[int, str]:
    return cli(capsys, "run", *TINY, "--results", str(results), "--data-root", str(data), *extra)


def rows(results: Path) -> list[tuple]:
    if not (results / "results.sqlite").exists():
        return []
    db = sqlite3.connect(results / "results.sqlite")
    try:
        return db.execute("SELECT run_id, status FROM runs").fetchall()
    finally:
        db.close()


def leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if "tmp" in p.name.lower()] if folder.exists() else []


MISSING = [("ray", []), ("submitit", ["--slurm-cluster", "local"])]


@pytest.mark.parametrize("package, flags", MISSING)
def test_a_missing_executor_package_is_refused_before_any_run_is_claimed(
    capsys, tmp_path, monkeypatch, package, flags
):
    monkeypatch.setitem(sys.modules, package, None)
    kind = "ray" if package == "ray" else "slurm"
    code, out = run(capsys, tmp_path / "R", tmp_path / "D", "--executor", kind, *flags)
    assert code == 2, out
    assert f"needs the package '{package}'" in out and "Traceback" not in out
    assert rows(tmp_path / "R") == []
