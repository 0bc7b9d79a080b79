"""Size and time of a kept policy (``run --keep-policy``) as its dataset grows 8x: a tiny
Push-T UVA run on 4 and on 32 scripted demo episodes of 30 steps (``make_demo_dataset``), its
policy kept in ``RESULTS/policies``. A kept policy holds what acting reads (a ``uva``
policy: its autoencoder, action codec and normalising statistics), never the dataset.

    python -m pytest benchmarks/test_bench_kept_policy.py -s

Measured on this workplace's 2-core CPU at load 0.3 (torch 2.13.0, one thread): 1,413,363
bytes from both 4 and 32 episodes; before ``Shared.__getstate__`` left the task's images
and encoded frames out, 8,313,011 and 56,608,691 bytes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from ssilbench.testing import cli_exit_code

TINY = {"profile": "small", "width": 32, "depth": 2, "heads": 2, "head_width": 32,
        "head_depth": 1, "sample_steps": 2, "diffusion_steps": 10, "vae_steps": 3,
        "pretrain_steps": 3, "batch_size": 4, "vae_batch": 4}  # fmt: skip
SIZES: dict[str, int] = {}


def _kept_bytes(tmp: Path, episodes: int) -> int:
    from ssilbench_pusht.replay import make_demo_dataset

    make_demo_dataset(tmp / "demo.zarr", num_episodes=episodes, seed=0, max_steps=30)
    assert cli_exit_code("data", "import", "pusht", "--from", str(tmp / "demo.zarr"),
                         "--data-root", str(tmp / "data")) == 0  # fmt: skip
    assert cli_exit_code("run", "--method", "bc", "--env", "pusht", "-o", "eval_episodes=2",
                         "-o", "max_steps=16", "--budgets", "2", "--seeds", "0", "--steps", "4",
                         "-c", "arch_options=" + json.dumps(TINY), "--keep-policy", "-q",
                         "--threads", "1", "--results", str(tmp / "results"),
                         "--data-root", str(tmp / "data")) == 0  # fmt: skip
    [kept] = (tmp / "results" / "policies").glob("*.pt")
    return kept.stat().st_size


@pytest.mark.parametrize("episodes", [4, 32])
def test_kept_policy_size_stays_flat_as_the_data_grow(benchmark, tmp_path, episodes):
    pytest.importorskip("gym_pusht", reason="gym-pusht is not installed: ssilbench[pusht]")
    torch.set_num_threads(1)
    start = time.perf_counter()
    size = benchmark.pedantic(_kept_bytes, args=(tmp_path, episodes), rounds=1, iterations=1)
    benchmark.extra_info.update(kept_bytes=size, seconds=time.perf_counter() - start)
    print(f"\n{episodes} episodes: kept policy {size:,} bytes")
    SIZES[str(episodes)] = size
    if len(SIZES) == 2:
        assert SIZES["32"] == SIZES["4"]  # nothing of the dataset in the file
