"""Memory and time of whole runs as the dataset grows 8x: uint8 frames end to end.

Synthetic data in the paper's Procgen layout (``<game>/train/<int>.npz`` chunks, random
64x64x3 frames, episodes of 400 frames) is written at 25,000 and 200,000 transitions and
imported with ``ssilbench data import procgen``. Then a ``bc`` run at N_L = all (every
transition labeled: D_L is the whole dataset) and an ``idm_labeling`` run at N_L = 1,024
(its labelling pass reads all of D_U) are run through the CLI, each in a fresh process,
with ``impala_small``, 8 steps and no rollouts. The peak resident memory of each process
(``ru_maxrss`` from ``wait4``) is recorded; frames read from the store live in the page
cache, which no process counts.

Run (about 15 minutes on two CPU cores, 6 GB of temporary disk)::

    python -m pytest benchmarks/test_bench_scale.py -s

The closing test asserts what the scale principle asks: peak RSS grows by less than 1.3x
while the data grow 8x.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ssilbench_procgen.chunks import write_synthetic_split

SIZES = (25_000, 200_000)
EPISODE = 400
RUNS = {
    "bc": ["--budgets", "all"],
    "idm_labeling": ["--budgets", "1024"],
}
MEASURED: dict[tuple[str, int], dict[str, float]] = {}


def _cli(*args: str) -> tuple[float, float]:
    """Run ``ssilbench ARGS`` in a fresh process: (wall seconds, peak RSS in GB)."""
    began = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ssilbench", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    _, status, usage = os.wait4(proc.pid, 0)
    output = proc.stdout.read().decode()
    proc.stdout.close()
    assert os.waitstatus_to_exitcode(status) == 0, output
    return time.perf_counter() - began, usage.ru_maxrss / 2**20  # KiB -> GiB


@pytest.fixture(scope="module", params=SIZES, ids=lambda n: f"{n // 1000}k")
def data_root(request, tmp_path_factory) -> tuple[int, Path]:
    n = request.param + request.param // (EPISODE - 1)  # frames for n transitions
    source = tmp_path_factory.mktemp(f"chunks{request.param}")
    write_synthetic_split(source / "bigfish" / "train", n, episode=EPISODE, seed=request.param)
    root = tmp_path_factory.mktemp(f"data{request.param}")
    _cli("data", "import", "procgen", "--from", str(source), "--data-root", str(root))
    for chunk in (source / "bigfish" / "train").iterdir():
        chunk.unlink()  # only the store is needed from here on
    return request.param, root


@pytest.mark.parametrize("method", list(RUNS))
def test_peak_memory_of_a_run(benchmark, data_root, method, tmp_path):
    transitions, root = data_root
    args = [
        *f"run --method {method} --env procgen:bigfish --steps 8 -c arch=impala_small".split(),
        *["--no-rollouts", "--threads", "2", "--quiet"],
        *RUNS[method],
        *("--data-root", str(root), "--results", str(tmp_path / "results")),
    ]
    wall, rss = benchmark.pedantic(lambda: _cli(*args), rounds=1, iterations=1)
    store_gb = transitions * 64 * 64 * 3 / 2**30
    info = {"transitions": transitions, "peak_rss_gib": round(rss, 3), "wall_s": round(wall, 1),
            "store_frames_gib": round(store_gb, 3)}  # fmt: skip
    benchmark.extra_info.update(info)
    MEASURED[(method, transitions)] = info
    print(f"\n  {method} on {transitions:,} transitions ({store_gb:.2f} GiB of frames): "
          f"peak RSS {rss:.2f} GiB, {wall:.0f} s")  # fmt: skip


def test_memory_grows_far_slower_than_the_data():
    small, large = SIZES
    missing = [(m, n) for m in RUNS for n in SIZES if (m, n) not in MEASURED]
    if missing:
        pytest.skip(f"needs the runs measured first: {missing}")
    for method in RUNS:
        ratio = (
            MEASURED[(method, large)]["peak_rss_gib"] / MEASURED[(method, small)]["peak_rss_gib"]
        )
        print(f"\n  {method}: peak RSS x{ratio:.2f} while the data grow x{large / small:.0f}")
        assert ratio < 1.3, f"{method}: peak RSS grew {ratio:.2f}x with {large // small}x the data"
