"""The stage-1 training step of ssilbench's default LAPO model on CPU, default memory layout
against channels-last, interleaved in one process on one thread (docs/methods/lapo.md, Speed).

    OMP_NUM_THREADS=1 python benchmarks/lapo_reference/channels_last.py [BATCH]
"""
# ruff: noqa: E402  (the repository root goes on sys.path before ssilbench is imported)

import sys
import time

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
from ssilbench_lapo.world_model import WorldModel, WorldModelConfig

torch.set_num_threads(1)
B = int(sys.argv[1]) if len(sys.argv) > 1 else 32
cfg = WorldModelConfig()
g = torch.Generator().manual_seed(0)
s = torch.rand(B, 3, 64, 64, generator=g)
sn = torch.rand(B, 3, 64, 64, generator=g)


def make(cl):
    torch.manual_seed(0)
    m = WorldModel(cfg, (3, 64, 64))
    if cl:
        m = m.to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(m.parameters(), lr=3e-4)
    x, y = (
        (
            s.contiguous(memory_format=torch.channels_last),
            sn.contiguous(memory_format=torch.channels_last),
        )
        if cl
        else (s, sn)
    )

    def step():
        loss = m.loss(x, y)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 2.0)
        opt.step()

    return step


variants = {"default": make(False), "channels_last": make(True)}
for f in variants.values():
    f()
times = {k: [] for k in variants}
for _ in range(4):
    for k, f in variants.items():
        t = time.perf_counter()
        f()
        times[k].append(time.perf_counter() - t)
import statistics

for k, v in times.items():
    print(
        k,
        "median s/step",
        round(statistics.median(v), 3),
        "samples/s",
        round(B / statistics.median(v), 2),
        [round(x, 2) for x in v],
    )
