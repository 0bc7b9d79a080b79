"""The stage-1 training step of ssilbench's default LAPO model on CPU, eager against the
loss under ``torch.compile`` (inductor), interleaved in one process on one thread
(docs/methods/lapo.md, Speed). The compiled variant's first step includes compilation.

    OMP_NUM_THREADS=1 python benchmarks/lapo_reference/compile_cpu.py [BATCH]
"""
# ruff: noqa: E402  (the repository root goes on sys.path before ssilbench is imported)

import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "plugins")]
from ssilbench_lapo.world_model import WorldModel, WorldModelConfig

torch.set_num_threads(1)
B = int(sys.argv[1]) if len(sys.argv) > 1 else 32
g = torch.Generator().manual_seed(0)
s = torch.rand(B, 3, 64, 64, generator=g)
sn = torch.rand(B, 3, 64, 64, generator=g)


def make(compiled: bool):
    torch.manual_seed(0)
    model = WorldModel(WorldModelConfig(), (3, 64, 64))
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    loss_fn = torch.compile(model.loss) if compiled else model.loss

    def step() -> float:
        loss = loss_fn(s, sn)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 2.0)
        opt.step()
        return loss.item()

    return step


variants = {"eager": make(False), "compiled": make(True)}
for name, step in variants.items():
    start = time.perf_counter()
    loss = step()
    print(name, "first step s", round(time.perf_counter() - start, 1), "loss", loss)
times: dict[str, list[float]] = {name: [] for name in variants}
for _ in range(4):
    for name, step in variants.items():
        start = time.perf_counter()
        step()
        times[name].append(time.perf_counter() - start)
for name, v in times.items():
    median = statistics.median(v)
    print(name, "median s/step", round(median, 3), "samples/s", round(B / median, 2),
          [round(x, 2) for x in v])  # fmt: skip
