"""UVA's two profiles on Push-T's inputs, step for step: ``paper`` (the default: the reference
code's 256-pixel frames, history stride 4, DDPM with a learned variance over 1000 noise levels
and 100 sampling steps, its crop-and-blur augmentation, the image only) against ``small``
(the frames as they are, stride 1, DDIM over 100 levels and 10 steps, no augmentation, the
image and the agent's position), both at the ``uva`` architecture's default sizes.

Push-T frames are 96x96: ``small`` encodes them to 6x6 = 36 tokens per frame, ``paper``
resizes them to 256x256 first, 16x16 = 256 tokens per frame (MAR-B's grid), so a window of
4 history + 4 future frames is 288 latent tokens against 2,048.

- ``test_train_step``: one Adam step of ``UVARoleModel.train`` in the ``full`` mode (the video
  and the action heads both trained), at minibatches of 2 and 16 windows (8x apart). With
  ``paper`` the step includes the augmentation and the encoding of the window's 8 frames,
  which the reference does for every training batch too.
- ``test_sample_chunk``: ``UVAPolicy.act`` for one observation, the policy path (one
  transformer pass and the action head's sampler), history encoding included.

torch runs with one thread on a CPU (``UVA_BENCH_THREADS`` to change it). The numbers are in
docs/methods/uva.md ("Step times of the profiles"):

    python -m pytest benchmarks/test_bench_uva_profiles.py -q -s

``UVA_BENCH_ARCH=uva_base`` measures the paper's sizes (261M parameters) instead of ``uva``'s,
and ``UVA_BENCH_BATCHES`` other minibatches (e.g. ``2,16,128``: 128 is the paper's): GPU work,
as a ``paper`` step of ``uva`` at batch 128 already takes minutes on a CPU thread:

    UVA_BENCH_ARCH=uva_base UVA_BENCH_BATCHES=2,16,128 \
        python -m pytest benchmarks/test_bench_uva_profiles.py -q -s
"""

from __future__ import annotations

import os
from functools import cache

import numpy as np
import pytest
import torch

from ssilbench.api import RunContext, Stage
from ssilbench.data.split import UnlabeledView
from ssilbench.stages import StagePlan
from ssilbench_pusht.environment import PushTOptions, PushTTask
from ssilbench_uva.architecture import Shared, UVARoleModel
from ssilbench_uva.options import UVABaseOptions, UVAOptions

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
CPU = DEVICE.type == "cpu"
THREADS = int(os.environ.get("UVA_BENCH_THREADS", "1"))
SPEC = PushTTask("pusht", PushTOptions()).spec  # a stack of 13: the paper's stride fits
PROFILES = ("small", "paper")
ARCHES = {"uva": UVAOptions, "uva_base": UVABaseOptions}
ARCH = os.environ.get("UVA_BENCH_ARCH", "uva")
if ARCH not in ARCHES:
    raise pytest.UsageError(f"UVA_BENCH_ARCH={ARCH!r}: use one of {', '.join(ARCHES)}.")
try:
    BATCHES = tuple(int(b) for b in os.environ.get("UVA_BENCH_BATCHES", "2,16").split(","))
except ValueError:
    raise pytest.UsageError("UVA_BENCH_BATCHES: comma-separated integers, e.g. 2,16,128.") from None
FRAMES = 80  # two episodes of 40 stored frames
STEPS = {"small": 2 if CPU else 20, "paper": 1 if CPU else 10}
ROUNDS = {"small": 3, "paper": 1 if CPU else 3}  # paper: about a minute a step on a CPU
RESULTS: list[tuple[str, str]] = []


@pytest.fixture(scope="module", autouse=True)
def _threads_and_summary():
    before = torch.get_num_threads()
    if CPU:
        torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)
    if RESULTS:
        threads = THREADS if CPU else torch.get_num_threads()
        print(f"\nUVA profiles, arch {ARCH} ({DEVICE}, torch threads {threads}):")
        for name, line in RESULTS:
            print(f"  {name:<28} {line}")


def _record(benchmark, name: str, line: str) -> None:
    benchmark.extra_info["device"] = str(DEVICE)
    benchmark.extra_info["arch"] = ARCH
    benchmark.extra_info["torch_threads"] = THREADS if CPU else torch.get_num_threads()
    RESULTS.append((name, line))
    print(f"\n{name}: {line}")


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def _view() -> UnlabeledView:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (FRAMES, 96, 96, 3), dtype=np.uint8)
    agent_pos = rng.uniform(0, 512, (FRAMES, 2)).astype(np.float32)
    ends = np.array([FRAMES // 2, FRAMES], dtype=np.int64)
    index = np.setdiff1d(np.arange(FRAMES), ends - 1)
    return UnlabeledView(frames=images, index=index, extras={"agent_pos": agent_pos},
                         episode_ends=ends)  # fmt: skip


@cache
def _shared(profile: str, batch: int) -> tuple[Shared, UnlabeledView]:
    view = _view()
    ctx = RunContext(config=None, spec=SPEC, labeled=None, unlabeled=view, video_model=None,
                     device=DEVICE, seed=0, plan=None, architectures=None,
                     evaluate=lambda policy: 0.0)  # fmt: skip
    # vae_steps=0: the autoencoder's weights stay random, which changes no timing.
    options = ARCHES[ARCH](profile=profile, vae_steps=0, batch_size=batch)
    return Shared(ctx, options), view


def _budget(steps: int):
    plan = StagePlan([Stage("stage", steps)], eval_every=10**9, evaluate=lambda policy: 0.0)
    return plan.stage("stage")


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("profile", PROFILES)
def test_train_step(benchmark, profile, batch):
    shared, view = _shared(profile, batch)
    model = UVARoleModel(shared, init_state=None)
    lay = shared.layout
    labels = np.random.default_rng(0).uniform(-1, 1, (len(view), lay.chunk, lay.action_dim))
    labels = labels.astype(np.float32)

    def run():
        model.train(["full"], view, _budget(STEPS[profile]), seed=0, labels=labels)
        _sync()

    run()  # untimed: the allocator, Adam's state, lazy initialisation
    benchmark.pedantic(run, rounds=ROUNDS[profile], iterations=1)
    ms = benchmark.stats["mean"] / STEPS[profile] * 1e3
    benchmark.extra_info.update(ms_per_step=round(ms, 1), batch=batch, tokens=lay.total,
                                windows_per_s=round(batch / ms * 1e3, 2))  # fmt: skip
    rate = batch / ms * 1e3
    line = f"{ms:9.0f} ms/step, {rate:7.2f} windows/s ({lay.total} tokens)"
    _record(benchmark, f"train {profile} batch {batch}", line)


@pytest.mark.parametrize("profile", PROFILES)
def test_sample_chunk(benchmark, profile):
    shared, _ = _shared(profile, BATCHES[0])
    policy = UVARoleModel(shared, init_state=None).policy("policy")
    g = torch.Generator().manual_seed(1)
    frames = torch.randint(0, 256, (1, SPEC.frame_stack, 96, 96, 3), generator=g,
                           dtype=torch.uint8)  # fmt: skip
    agent_pos = 512 * torch.rand(1, SPEC.frame_stack, 2, generator=g)
    obs = {"obs": frames.to(DEVICE), "agent_pos": agent_pos.to(DEVICE)}
    generator = torch.Generator().manual_seed(0)

    def run():
        policy.act(obs, generator=generator)
        _sync()

    run()
    benchmark.pedantic(run, rounds=ROUNDS[profile], iterations=1)
    ms = benchmark.stats["mean"] * 1e3
    steps = shared.options.sample_steps
    benchmark.extra_info.update(ms_per_chunk=round(ms, 1), sample_steps=steps)
    line = f"{ms:9.0f} ms/chunk of 16 actions ({steps} sampling steps, encoding included)"
    _record(benchmark, f"sample {profile}", line)
