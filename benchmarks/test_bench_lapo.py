"""Training throughput (samples/s) of every stage of lapo, lapo_plus, bc and idm_labeling at
batch 128 on 64x64x3 frames (Procgen's), through the code paths the methods train with.

Each benchmark times STEPS optimiser steps of one stage on random frames and reports
``samples_per_s`` = STEPS x 128 / mean time. Two model sizes: ``small`` (IMPALA x1, U-Net
(16, 32); what CPU tests use) and ``paper`` (IMPALA x4, U-Net (64, 128, 256); marked
``slow``). Select with ``-k small`` or ``-m slow``, e.g.

    OMP_NUM_THREADS=1 python -m pytest benchmarks/test_bench_lapo.py -k "small or decoding_head"

On CUDA every stage uses bf16 autocast and channels-last (LAPO's ``fast_cuda``; the
baselines' ``impala_bf16``); on the CPU LAPO's stages train in float32 channels-last (its
``memory_format``), the baselines' contiguous. Frames stay uint8 until they reach the device, as
in the methods (``ssilbench.data.batches``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssilbench.api import EnvSpec, Normaliser, RunContext, Stage
from ssilbench.data.batches import FrameInputs, TransitionFrames
from ssilbench.data.split import UnlabeledView
from ssilbench.stages import StagePlan
from ssilbench.train.supervised import fit_classifier, fit_regressor, speed_of
from ssilbench_baselines.impala import Impala, ImpalaBF16, mlp
from ssilbench_lapo.world_model import (
    WorldModelConfig,
    action_policy_net,
    impala_net,
    speed_for,
    train_world_model,
)

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BATCH = 128
FRAMES = 1024
STEPS = 4 if DEVICE.type == "cpu" else 50
SIZES = ["small", pytest.param("paper", marks=pytest.mark.slow)]
SPEC = EnvSpec(env_id="bench", obs_shape=(3, 64, 64), obs_dtype="uint8", obs_kind="image",
               num_actions=15, horizon=1, eval_episodes=1, eval_every=10**9, default_steps=1,
               default_arch="impala", normaliser=Normaliser(name="-", low=0.0, high=1.0),
               )  # fmt: skip


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (FRAMES + 1, 3, 64, 64), dtype=np.uint8)


def _budget(name: str = "stage"):
    plan = StagePlan([Stage(name, STEPS)], eval_every=10**9, evaluate=lambda policy: 0.0)
    return plan.stage(name)


def _report(benchmark, run) -> None:
    run()  # warm-up: allocator, kernels, lazy initialisation
    benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info["device"] = str(DEVICE)
    benchmark.extra_info["samples_per_s"] = round(STEPS * BATCH / benchmark.stats["mean"], 1)


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def _unlabeled(frames: np.ndarray) -> TransitionFrames:
    view = UnlabeledView(frames=frames, index=np.arange(FRAMES))
    return TransitionFrames(view, DEVICE)


def _config(size: str) -> WorldModelConfig:
    return WorldModelConfig(size=size)


@pytest.mark.parametrize("size", SIZES)
def test_lapo_world_model(benchmark, frames, size):
    """Stage 1 of both methods: latent IDM + VQ + U-Net forward model on D_U."""
    cfg, data = _config(size), _unlabeled(frames)
    ctx = RunContext(config=cfg, spec=SPEC, labeled=None, unlabeled=None, video_model=None,
                     device=DEVICE, seed=0, plan=StagePlan([], 1, lambda p: 0.0),
                     architectures=None, evaluate=lambda policy: 0.0)  # fmt: skip

    def run():
        train_world_model(ctx, cfg, data, _budget("world_model"))
        _sync()

    _report(benchmark, run)


@pytest.mark.parametrize("size", SIZES)
def test_lapo_latent_policy(benchmark, frames, size):
    """LAPO stage 2: IMPALA latent policy regressed onto 128-dim latents of D_U."""
    cfg, data = _config(size), _unlabeled(frames)
    targets = torch.randn(len(data), cfg.latent_dim, device=DEVICE)
    speed = speed_for(cfg, DEVICE)
    net = speed.module(impala_net(cfg, SPEC.obs_shape, cfg.latent_dim).to(DEVICE))

    def run():
        fit_regressor(net, data.inputs("obs"), targets, _budget(), lr=cfg.lr, batch_size=BATCH,
                      seed=0, speed=speed)  # fmt: skip
        _sync()

    _report(benchmark, run)


@pytest.mark.parametrize("size", SIZES)
def test_lapo_plus_policy(benchmark, frames, size):
    """LAPO+ stage 3: IMPALA policy cloned from soft labels on D_U."""
    cfg, data = _config(size), _unlabeled(frames)
    labels = torch.softmax(torch.randn(len(data), 15, device=DEVICE), dim=-1)
    speed = speed_for(cfg, DEVICE)
    net = speed.module(action_policy_net(cfg, SPEC.obs_shape, 15).to(DEVICE))

    def run():
        fit_classifier(net, data.inputs("obs"), labels, _budget(), lr=cfg.lr, batch_size=BATCH,
                       seed=0, speed=speed)  # fmt: skip
        _sync()

    _report(benchmark, run)


def test_lapo_decoding_head(benchmark):
    """LAPO stage 3 and LAPO+ stage 2: the MLP head on precomputed 128-dim latents of D_L
    (the frozen backbone runs once, before the stage; size-independent)."""
    latents = torch.randn(4096, 128, device=DEVICE)
    actions = torch.randint(0, 15, (4096,), device=DEVICE)
    head = mlp(128, (128, 128), 15).to(DEVICE)

    def run():
        fit_classifier(head, latents, actions, _budget(), lr=2e-4, batch_size=BATCH, seed=0)
        _sync()

    _report(benchmark, run)


def _baseline(size: str) -> Impala:
    return ImpalaBF16(scale=_config(size).scale)


def _classifier_steps(benchmark, arch: Impala, inputs: FrameInputs) -> None:
    """The baselines' own path: ``fit_classifier`` on a view's frames with random labels."""
    channels = 6 if inputs.kind == "pair" else 3
    speed = speed_of(arch, DEVICE)
    net = speed.module(arch.build((channels, 64, 64), 15).to(DEVICE))
    actions = torch.randint(0, 15, (len(inputs),), device=DEVICE)

    def run():
        fit_classifier(net, inputs, actions, _budget(), lr=2e-4, batch_size=BATCH, seed=0,
                       speed=speed)  # fmt: skip
        _sync()

    _report(benchmark, run)


@pytest.mark.parametrize("size", SIZES)
def test_bc_policy(benchmark, frames, size):
    """BC (and idm_labeling's policy stage): IMPALA classifier on the states of a view."""
    _classifier_steps(benchmark, _baseline(size), _unlabeled(frames).inputs("obs"))


@pytest.mark.parametrize("size", SIZES)
def test_idm_labeling_idm(benchmark, frames, size):
    """idm_labeling's IDM stage: IMPALA on (s, s') stacked as 6 channels."""
    _classifier_steps(benchmark, _baseline(size), _unlabeled(frames).inputs("pair"))
