"""Every convolutional LAPO stage's training step on CPU, default (contiguous) memory layout
against channels-last, interleaved in one process on one thread (docs/methods/lapo.md, Speed).

    OMP_NUM_THREADS=1 python benchmarks/lapo_reference/channels_last.py [BATCH [ROUNDS [STAGE]]]

Stages: ``world_model`` (stage 1: latent IDM + VQ + forward model, Adam, clip 2),
``latent_policy`` (``lapo`` stage 2: IMPALA net to the 128-d latent, MSE), ``policy``
(``lapo_plus`` stage 3: IMPALA net + decoding head, cross-entropy), ``labels`` (the frozen
latent IDM's forward over a batch of (s, s'), the pass that labels D_U once). Each step
converts its float batch to the layout, as the stage's ``speed.forward`` does. The decoding
heads train on precomputed latents (MLPs, no convolution) and are not timed here.
"""
# ruff: noqa: E402  (the repository root goes on sys.path before ssilbench is imported)

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins"))
from ssilbench_lapo.world_model import (
    WorldModel,
    WorldModelConfig,
    action_policy_net,
    impala_net,
)

torch.set_num_threads(1)
BATCH = int(sys.argv[1]) if len(sys.argv) > 1 else 128
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
ONLY = sys.argv[3] if len(sys.argv) > 3 else None
OBS = (3, 64, 64)
cfg = WorldModelConfig()
g = torch.Generator().manual_seed(0)
s = torch.rand(BATCH, *OBS, generator=g)
sn = torch.rand(BATCH, *OBS, generator=g)
latents = torch.randn(BATCH, cfg.latent_dim, generator=g)
actions = torch.randint(0, 15, (BATCH,), generator=g)


def layout(x: torch.Tensor, cl: bool) -> torch.Tensor:
    return x.contiguous(memory_format=torch.channels_last) if cl else x


def trained(net: torch.nn.Module, loss: Callable[[], torch.Tensor]) -> Callable[[], None]:
    opt = torch.optim.Adam(net.parameters(), lr=3e-4)

    def step() -> None:
        value = loss()
        opt.zero_grad()
        value.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 2.0)
        opt.step()

    return step


def world_model(cl: bool) -> Callable[[], None]:
    torch.manual_seed(0)
    m = WorldModel(cfg, OBS).to(memory_format=torch.channels_last if cl else torch.preserve_format)
    return trained(m, lambda: m.loss(layout(s, cl), layout(sn, cl)))


def latent_policy(cl: bool) -> Callable[[], None]:
    torch.manual_seed(0)
    net = impala_net(cfg, OBS, cfg.latent_dim)
    net = net.to(memory_format=torch.channels_last) if cl else net
    return trained(net, lambda: F.mse_loss(net(layout(s, cl)), latents))


def policy(cl: bool) -> Callable[[], None]:
    torch.manual_seed(0)
    net = action_policy_net(cfg, OBS, 15)
    net = net.to(memory_format=torch.channels_last) if cl else net
    return trained(net, lambda: F.cross_entropy(net(layout(s, cl)), actions))


def labels(cl: bool) -> Callable[[], None]:
    torch.manual_seed(0)
    idm = WorldModel(cfg, OBS).eval().requires_grad_(False).idm
    idm = idm.to(memory_format=torch.channels_last) if cl else idm
    pairs = torch.cat([s, sn], dim=1)

    @torch.no_grad()
    def step() -> None:
        idm.encode(layout(pairs, cl))

    return step


STAGES = {"world_model": world_model, "latent_policy": latent_policy, "policy": policy,
          "labels": labels}  # fmt: skip

for name, make in STAGES.items():
    if ONLY and name != ONLY:
        continue
    sides = {"contiguous": make(False), "channels_last": make(True)}
    for f in sides.values():  # warm-up: allocator, kernels, Adam state
        f()
    times: dict[str, list[float]] = {k: [] for k in sides}
    order = list(sides)
    for _ in range(ROUNDS):
        for k in order:
            t = time.perf_counter()
            sides[k]()
            times[k].append(time.perf_counter() - t)
        order.reverse()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"{name} batch {BATCH}: contiguous {med['contiguous']:.3f} s "
        f"({BATCH / med['contiguous']:.2f}/s), channels_last {med['channels_last']:.3f} s "
        f"({BATCH / med['channels_last']:.2f}/s), speed-up "
        f"{med['contiguous'] / med['channels_last']:.2f}x; steps "
        f"{[round(x, 2) for x in times['contiguous']]} / "
        f"{[round(x, 2) for x in times['channels_last']]}",
        flush=True,
    )
