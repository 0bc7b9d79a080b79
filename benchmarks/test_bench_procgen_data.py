"""Cost of the Procgen store: bytes per transition on disk and in RAM, and (s, s') sampling.

Run with ``python -m pytest benchmarks/test_bench_procgen_data.py`` (not part of the default
test run). The store is imported from chunks written in the paper's layout (random frames,
episodes of ~400 frames); sizes scale linearly, so a small store gives the per-transition
figures of the 2.6M-frame one. The numbers are printed and kept in the benchmark's
``extra_info``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ssilbench.data.datasets import TransitionStore
from ssilbench.data.split import split
from ssilbench_procgen.chunks import write_synthetic_split
from ssilbench_procgen.environment import ProcgenEnvironment, ProcgenOptions

CHUNKS = 4
CHUNK_FRAMES = 4096
EPISODE = 400
BATCH = 128


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


@pytest.fixture(scope="module")
def store_root(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("lapo")
    write_synthetic_split(source / "bigfish" / "train", CHUNKS * CHUNK_FRAMES,
                          episode=EPISODE, chunk=CHUNK_FRAMES)  # fmt: skip
    root = tmp_path_factory.mktemp("data")
    ProcgenEnvironment().import_dataset(
        source, root, ["bigfish"], ProcgenOptions(), log=lambda _: None
    )
    return root


def test_bytes_per_transition(benchmark, store_root):
    task = ProcgenEnvironment().load("bigfish", ProcgenOptions())
    anon_before = _status_kib("RssAnon")

    def open_and_split():
        store = task.dataset(store_root)
        return store, split(store, "1024", seed=0)

    store, (labeled, unlabeled) = benchmark.pedantic(open_and_split, rounds=3, iterations=1)
    anon_after = _status_kib("RssAnon")
    n = store.num_transitions
    disk = sum(f.stat().st_size for f in store.root.iterdir())
    # What a run holds privately: the transition index (and D_L's actions), not the frames,
    # which stay in the page cache shared by every process that maps the store.
    held = unlabeled.index.nbytes + labeled.index.nbytes + labeled.actions.nbytes
    info = {
        "transitions": n,
        "disk_bytes_per_transition": disk / n,
        "ram_bytes_per_transition_index": held / n,
        "ram_anon_growth_bytes_per_transition": max(0, anon_after - anon_before) * 1024 / n,
        "float32_hwc_in_ram_bytes_per_transition_reference_loader": 2 * 64 * 64 * 3 * 4,
    }
    benchmark.extra_info.update(info)
    print("\n" + "\n".join(f"  {k}: {v:,.1f}" for k, v in info.items()))
    assert isinstance(store.obs, np.memmap)
    assert disk / n < 64 * 64 * 3 * 1.01 + 64


def test_sample_pairs_rate(benchmark, store_root):
    store = TransitionStore.open(store_root / "procgen" / "expert" / "bigfish" / "train")
    _, unlabeled = split(store, "all", seed=0)
    rng = np.random.Generator(np.random.PCG64(1))

    def sample():
        rows = rng.integers(0, len(unlabeled), size=BATCH)
        return unlabeled.obs(rows), unlabeled.next_obs(rows)

    obs, nxt = benchmark(sample)
    assert obs.shape == nxt.shape == (BATCH, 3, 64, 64)
    mean = benchmark.stats.stats.mean
    info = {"batches_per_s": 1 / mean, "pairs_per_s": BATCH / mean}
    benchmark.extra_info.update(info)
    print(f"\n  batch of {BATCH} (s, s') pairs: {mean * 1e3:.2f} ms, {BATCH / mean:,.0f} pairs/s")
