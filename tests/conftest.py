"""Shared fixtures: running the CLI in a subprocess, small plugin modules on disk, and the
installed plugins alone."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TINY = ["--steps", "60", "-q"]

# Estimates in tests come from the step times a test gives or measures, never from the table
# shipped with ssilbench (tests/runner/test_step_table.py tests that one).
os.environ["SSILBENCH_STEP_TABLE"] = os.devnull

# `pytest -n auto` (pytest-xdist): a worker per core this process may use, at most 8. Each
# worker imports torch and the simulators, and some tests start pools of their own, so a
# worker per core of a large machine would spend memory, not time.
MAX_TEST_WORKERS = 8


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent without it
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    return max(1, min(MAX_TEST_WORKERS, len(os.sched_getaffinity(0))))


@pytest.fixture(scope="module")
def plugins():
    """The installed plugins only: no extra plugin module named by the environment."""
    from ssilbench.plugins import AUTOLOAD_ENV, EXTRA_PLUGINS_ENV, load_plugins

    with pytest.MonkeyPatch.context() as mp:
        mp.delenv(AUTOLOAD_ENV, raising=False)
        mp.delenv(EXTRA_PLUGINS_ENV, raising=False)
        loaded = load_plugins()
    assert loaded.broken == []
    return loaded


class CLI:
    """Runs ``python -m ssilbench`` with a private data root and results directory."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.results = tmp / "results"
        self.data = tmp / "data"
        self.plugin_dir = tmp / "plugin_modules"
        self.plugin_dir.mkdir()

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(self.plugin_dir), *filter(None, [env.get("PYTHONPATH")])]
        )
        # One intra-op thread: these runs are tiny, and spinning OpenMP threads make a
        # loaded machine crawl.
        env.setdefault("OMP_NUM_THREADS", "1")
        env.pop("SSILBENCH_DISABLE_PLUGIN_AUTOLOAD", None)
        env.pop("SSILBENCH_PLUGINS", None)
        return env

    def __call__(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "ssilbench", *args],
            capture_output=True,
            text=True,
            env=self.env(),
            cwd=self.tmp,
            timeout=timeout,
        )

    def run(self, *args: str, **kw) -> subprocess.CompletedProcess:
        """``ssilbench run`` against this fixture's results and data folders."""
        return self(
            "run", *args, "--results", str(self.results), "--data-root", str(self.data), **kw
        )

    def write_plugin(self, name: str, source: str) -> None:
        (self.plugin_dir / f"{name}.py").write_text(textwrap.dedent(source))

    def rows(self) -> list[tuple]:
        db = sqlite3.connect(self.results / "results.sqlite")
        try:
            return db.execute(
                "SELECT run_id, status, attempts, finished_at, score FROM runs ORDER BY run_id"
            ).fetchall()
        finally:
            db.close()


@pytest.fixture
def cli(tmp_path: Path) -> CLI:
    return CLI(tmp_path)


@pytest.fixture
def one_thread():
    """Torch on one thread for the test (small models are 5-10x slower on several under
    load), restored after it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
