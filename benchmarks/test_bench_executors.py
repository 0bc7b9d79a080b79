"""Per-run overhead of each executor: scheduling plus the store write, with a trivial run.

A trivial run is BC on maze:10x10 for one step, scored on the test set only. A sweep of
N such runs (unstacked) is timed on a fresh store, then again with nothing left to do (the
executor's start-up, plugin loading and planning alone); the overhead per run is the
difference over N. Target: under 1 s per run for local and for Ray once started.
Run with ``python -m pytest benchmarks/test_bench_executors.py -s``.
"""

from __future__ import annotations

import os
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

N_BUDGETS = ["8", "16", "24", "32", "40", "48"]
SEEDS = "0,1,2,3"
N = len(N_BUDGETS) * 4
TRIVIAL = ["run", "--method", "bc", "--env", "maze:10x10", "--budgets", ",".join(N_BUDGETS),
           "--seeds", SEEDS, "--steps", "1", "--no-rollouts", "--no-stack", "--no-cache",
           "-q"]  # fmt: skip
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def _sweep(results: Path, data: Path, *extra: str) -> float:
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ssilbench", *TRIVIAL, "--results", str(results),
                    "--data-root", str(data), *extra], check=True, env=ENV,
                   capture_output=True)  # fmt: skip
    return time.perf_counter() - began


def _steady(results: Path, parallel: int) -> float:
    """Scheduling + store write per run once workers are up: the time between finishes,
    times the runs in flight, less the run's own compute (median over the later runs)."""
    db = sqlite3.connect(results / "results.sqlite")
    rows = db.execute("SELECT finished_at, wall_time FROM runs ORDER BY finished_at").fetchall()
    db.close()
    later = rows[parallel:]  # the first ones include starting the workers
    gaps = [b[0] - a[0] for a, b in zip(later, later[1:], strict=False)]
    return statistics.median(gaps) * parallel - statistics.median(w for _, w in later)


def _overhead(tmp_path: Path, parallel: int | None, *extra: str) -> dict[str, float]:
    data = tmp_path / "data"
    _sweep(tmp_path / "warm", data)  # the dataset exists before anything is timed
    full = _sweep(tmp_path / "r", data, *extra)
    empty = _sweep(tmp_path / "r", data, *extra)
    # A job array's results are recorded in submission order once jobs end, so the time
    # between finishes says nothing there (parallel None).
    steady = _steady(tmp_path / "r", parallel) if parallel else float("nan")
    return {"sweep_s": full, "startup_s": empty, "per_run_s": (full - empty) / N,
            "steady_per_run_s": steady}  # fmt: skip


@pytest.mark.parametrize("executor", ["local", "local-2-workers", "ray", "slurm-local"])
def test_executor_overhead_per_run(benchmark, tmp_path, executor):
    extra: list[str] = {
        "local": [], "local-2-workers": ["--workers", "2"],
        "slurm-local": ["--executor", "slurm", "--slurm-cluster", "local"],
    }.get(executor, [])  # fmt: skip
    head = None
    if executor == "ray":
        pytest.importorskip("ray")
        ray = Path(sys.executable).with_name("ray")
        subprocess.run([str(ray), "start", "--head", "--port=6390", "--num-cpus=2",
                        "--include-dashboard=false", "--disable-usage-stats"], check=True,
                       env=ENV, capture_output=True)  # fmt: skip
        head = ray
        extra = ["--executor", "ray", "--ray-address", "127.0.0.1:6390"]
    if executor == "slurm-local":
        pytest.importorskip("submitit")
    try:
        parallel = {"local": 1, "slurm-local": None}.get(executor, 2)
        result = benchmark.pedantic(_overhead, args=(tmp_path, parallel, *extra), rounds=1,
                                    iterations=1)  # fmt: skip
    finally:
        if head is not None:
            subprocess.run([str(head), "stop", "--force"], env=ENV, capture_output=True)
    benchmark.extra_info.update(result)
    print(
        f"\n{executor}: {result['per_run_s']:.3f} s per run over {N} runs, workers' start "
        f"included; {result['steady_per_run_s']:.3f} s per run once started (sweep start-up "
        f"{result['startup_s']:.1f} s)"
    )
