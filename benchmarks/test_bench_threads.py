"""Wall time of the README's tiny maze sweep under each ``--threads`` setting: ``auto`` (the
default: one thread for these small networks), ``1``, and ``torch`` (torch's own default,
every core), each in a fresh process without ``OMP_NUM_THREADS`` (which ``auto`` would
follow), on a dataset built beforehand and without the stage cache.

Run with ``python -m pytest benchmarks/test_bench_threads.py``; each setting is timed once
(one round), the machine's load average (``os.getloadavg``) is kept with each result
(``extra_info``), and the thread count the runs recorded is checked: a busy machine is
where the default matters (docs/guide.md, "Threads").
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ssilbench.testing import run_records

SWEEP = ["--method", "bc,idm_labeling,vm_idm", "--env", "maze:10x10", "--budgets", "16,64,256",
         "--seeds", "0,1"]  # fmt: skip


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env.pop("SSILBENCH_PLUGINS", None)
    env.pop("SSILBENCH_DISABLE_PLUGIN_AUTOLOAD", None)
    return env


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("data")
    built = subprocess.run([sys.executable, "-m", "ssilbench", "data", "build", "maze:10x10",
                            "--data-root", str(root)], env=_env(), capture_output=True)  # fmt: skip
    assert built.returncode == 0, built.stderr
    return root


@pytest.mark.parametrize("threads", ["auto", "1", "torch"])
def test_tiny_maze_sweep(benchmark, data, tmp_path, threads):
    results = tmp_path / "results"

    def run() -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "ssilbench", "run", *SWEEP, "--threads", threads,
             "--no-cache", "-y", "--results", str(results), "--data-root", str(data)],
            env=_env(), capture_output=True, text=True, timeout=1800,
        )  # fmt: skip

    load_before = os.getloadavg()
    done = benchmark.pedantic(run, rounds=1, iterations=1)
    assert done.returncode == 0, done.stderr
    recorded = {r["device"] for r in run_records(results)}
    benchmark.extra_info.update(
        threads=threads,
        recorded=sorted(recorded),
        cores=len(os.sched_getaffinity(0)),
        load_before=[round(x, 2) for x in load_before],
        load_after=[round(x, 2) for x in os.getloadavg()],
    )
    if threads in ("auto", "1"):
        assert recorded == {next(iter(recorded))} and "1 threads" in next(iter(recorded))
