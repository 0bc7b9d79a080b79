"""Time of a dry run that prices the paper's Procgen sweep from the shipped step table (no
measuring: measured entries, and the others scaled by their shipped FLOP counts), at two
sweep sizes: 8 runs (the four methods on one game, budgets 1,024 and all, one seed) and the
whole sweep file (16 games x 14 budgets x 3 seeds x 4 methods: 2,688 runs, 336x more).
Each is ``ssilbench run ... --dry-run`` in a fresh process, as a user runs it (Python,
torch and the plugins load first), on random frames of the tasks' shape (no data).

    python -m pytest benchmarks/test_bench_dry_run_pricing.py -s

The dry run must price every stage ("?" nowhere) and must not measure.

Measured on this workplace's 2-core CPU at load 3.4 (torch 2.13.0): 8 runs 3.2 s, 2,688 runs
5.3 s. Most of the 3.2 s is starting Python, torch and the plugins; pricing grows with the
runs (each run's stages looked up in the table) and the distinct step-time keys (16 for the
whole sweep), not with the step times' size. Before each key was written out once and each
(method, task) network sized once, `plan` of the whole sweep took 10.9 s at load 3.5.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = {
    "8 runs": ["--method", "bc,idm_labeling,lapo,lapo_plus", "--env", "procgen:bigfish",
               "--budgets", "1024,all", "--seeds", "0"],
    "2,688 runs": ["--sweep", str(ROOT / "benchmarks" / "paper" / "procgen.toml")],
}  # fmt: skip


def _dry_run(args: list[str]) -> tuple[float, str]:
    env = {**os.environ}
    env.pop("SSILBENCH_STEP_TABLE", None)  # the shipped table
    env.pop("SSILBENCH_STEP_FLOPS", None)
    with tempfile.TemporaryDirectory() as tmp:
        command = [sys.executable, "-m", "ssilbench", "run", *args, "--dry-run", "--results",
                   tmp, "--data-root", str(Path(tmp) / "data")]  # fmt: skip
        began = time.perf_counter()
        out = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
        return time.perf_counter() - began, out.stdout + out.stderr


@pytest.mark.parametrize("size", SWEEPS)
def test_dry_run_prices_the_procgen_sweep(benchmark, size):
    seconds, text = benchmark.pedantic(_dry_run, args=(SWEEPS[size],), rounds=1, iterations=1)
    stages = text.split("Stages to train:")[1].split("Estimated compute")[0]
    assert "?" not in stages and "measuring" not in text, text
    assert "Estimated compute: training" in text
    benchmark.extra_info["seconds"] = seconds
    print(f"\n{size}: {seconds:.1f} s")
