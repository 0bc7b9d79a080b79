"""UVA on Push-T's inputs (96x96x3 frames + agent xy, 4 history frames, 4 future frames,
chunks of 16 two-dimensional actions), through the code paths the methods use.

The inputs are built without the runner but with the plugin's own objects: the Push-T task's
``EnvSpec``, a ``RunContext`` over random frames, and ``ssilbench_uva.architecture.Shared``
(autoencoder + every frame encoded once; ``vae_steps=0``, so its weights are random, which
changes no timing). The KL-16-style autoencoder downsamples by 16 at both sizes, so every
frame is 6x6 = 36 latent tokens of 16 channels; a window is 4x36 history + 4x36 future + 4
proprio + 16 action tokens = 308 tokens.

- ``test_train_step``: ``UVARoleModel.train`` in one task mode (policy, video, forward,
  inverse, full) for STEPS Adam steps; ``samples_per_s`` = windows per second.
- ``test_sample_chunk``: ``UVAPolicy.act`` for one observation (batch 1), sampling path
  ``policy`` (one transformer pass + the action head's DDIM) or ``vm_idm`` (a pass in video
  mode + the video head's DDIM over the 144 future tokens, then a pass in inverse mode + the
  action head's DDIM). The timed call includes encoding the 4 history frames with the
  autoencoder; ``net_ms`` is the same call on pre-encoded tokens (the network alone).
- ``test_encode``: the autoencoder's posterior mean for the 4 history frames of one call.
- ``test_parameters``: parameter counts (backbone, heads, autoencoder), printed.

Two sizes: ``small`` (``UVAOptions`` at its ``small`` profile, what CPU tests use) and
``paper`` (``UVABaseOptions``: MAR-B width 768 x 24 blocks, KL-16 autoencoder, heads 6 x 1024,
at the default ``paper`` profile: 256-pixel frames, history stride 4, DDPM over 100 steps;
marked ``slow``, tiny batch on a CPU). The two profiles side by side at ``uva``'s sizes:
``benchmarks/test_bench_uva_profiles.py``. ``legacy`` is the small size with
the options of ``LEGACY`` (ssilbench's UVA before the reference defaults: sequence layout,
per-token action head, Adam, no EMA, no dropout), to compare with the defaults (fused
layout, pooled action head, AdamW + EMA, dropout 0.1). On a CPU torch runs with one thread
unless UVA_BENCH_THREADS says otherwise. Select with ``-k small`` or ``-m slow``:

    python -m pytest benchmarks/test_bench_uva.py -q -s -m "not slow"
"""

from __future__ import annotations

import os
import time
from functools import cache

import numpy as np
import pytest
import torch

from ssilbench.api import RunContext, Stage
from ssilbench.data.split import UnlabeledView
from ssilbench.stages import StagePlan
from ssilbench_pusht.environment import PushTOptions, PushTTask
from ssilbench_uva.architecture import Shared, UVAPolicy, UVARoleModel, layout_for, network
from ssilbench_uva.autoencoder import KLAutoencoder
from ssilbench_uva.modes import MODES
from ssilbench_uva.options import LEGACY, UVABaseOptions, UVAOptions

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
CPU = DEVICE.type == "cpu"
THREADS = int(os.environ.get("UVA_BENCH_THREADS", "1"))
SPEC = PushTTask("pusht", PushTOptions()).spec
SIZES = ["small", "legacy", pytest.param("paper", marks=pytest.mark.slow)]
# Windows per minibatch: the options' own (32) at the small size; the paper's 128 is GPU work.
OPTIONS = {
    "small": UVAOptions(profile="small", vae_steps=0),
    "legacy": UVAOptions(vae_steps=0, **LEGACY),
    "paper": UVABaseOptions(vae_steps=0, batch_size=2 if CPU else 128),
}
STEPS = {"small": 3 if CPU else 20, "legacy": 3 if CPU else 20, "paper": 1 if CPU else 10}
ROUNDS = {"small": 3, "legacy": 3, "paper": 1}
FRAMES = {"small": 64, "legacy": 64, "paper": 16}  # stored frames (two episodes), per size
RESULTS: list[tuple[str, str]] = []


@pytest.fixture(scope="module", autouse=True)
def _threads_and_summary():
    before = torch.get_num_threads()
    if CPU:
        torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(before)
    if RESULTS:
        print(f"\nUVA benchmark summary ({DEVICE}, torch threads {torch_threads()}):")
        for name, line in RESULTS:
            print(f"  {name:<34} {line}")


def torch_threads() -> int:
    return THREADS if CPU else torch.get_num_threads()


def _record(benchmark, name: str, line: str) -> None:
    benchmark.extra_info["device"] = str(DEVICE)
    benchmark.extra_info["torch_threads"] = torch_threads()
    RESULTS.append((name, line))
    print(f"\n{name}: {line}")


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def _view(frames: int) -> UnlabeledView:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (frames, 96, 96, 3), dtype=np.uint8)
    agent_pos = rng.uniform(0, 512, (frames, 2)).astype(np.float32)
    ends = np.array([frames // 2, frames], dtype=np.int64)
    index = np.setdiff1d(np.arange(frames), ends - 1)  # transitions: not an episode's last
    return UnlabeledView(frames=images, index=index, extras={"agent_pos": agent_pos},
                         episode_ends=ends)  # fmt: skip


@cache
def _shared(size: str) -> tuple[Shared, UnlabeledView]:
    view = _view(FRAMES[size])
    ctx = RunContext(config=None, spec=SPEC, labeled=None, unlabeled=view, video_model=None,
                     device=DEVICE, seed=0, plan=None, architectures=None,
                     evaluate=lambda policy: 0.0)  # fmt: skip
    return Shared(ctx, OPTIONS[size]), view


def _budget(steps: int, name: str = "stage"):
    plan = StagePlan([Stage(name, steps)], eval_every=10**9, evaluate=lambda policy: 0.0)
    return plan.stage(name)


def _count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _obs(batch: int = 1) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    stack = SPEC.frame_stack  # the paper profile reads t-12, t-8, t-4, t of it
    images = torch.randint(0, 256, (batch, stack, 96, 96, 3), generator=g, dtype=torch.uint8)
    agent_pos = 512 * torch.rand(batch, stack, 2)
    return {"obs": images.to(DEVICE), "agent_pos": agent_pos.to(DEVICE)}


def _time_training(benchmark, shared, view, mode: str, steps: int, rounds: int) -> None:
    """Times ``rounds`` rounds of ``steps`` training steps of one mode on random labels,
    after one untimed round (allocator, Adam state, lazy initialisation)."""
    model = UVARoleModel(shared, init_state=None)
    lay = shared.layout
    labels = np.random.default_rng(0).uniform(-1, 1, (len(view), lay.chunk, lay.action_dim))
    labels = labels.astype(np.float32)

    def run():
        model.train([mode], view, _budget(steps), seed=0, labels=labels)
        _sync()

    run()
    benchmark.pedantic(run, rounds=rounds, iterations=1)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", SIZES)
def test_train_step(benchmark, size, mode):
    """One task mode's training (``UVARoleModel.train`` with that mode as its role)."""
    shared, view = _shared(size)
    batch, steps, lay = shared.options.batch_size, STEPS[size], shared.layout
    _time_training(benchmark, shared, view, mode, steps, ROUNDS[size])
    rate = steps * batch / benchmark.stats["mean"]
    benchmark.extra_info.update(samples_per_s=round(rate, 2), batch=batch, steps=steps,
                                tokens=lay.total)  # fmt: skip
    _record(benchmark, f"train {size} {mode}",
            f"{rate:8.2f} windows/s (batch {batch}, {steps} steps/round, "
            f"{benchmark.stats['mean'] / steps * 1e3:.0f} ms/step)")  # fmt: skip


class _PreEncoded(UVAPolicy):
    """The same policy on fixed, already-encoded history tokens (the network alone)."""

    def __init__(self, model: UVARoleModel, path: str, tokens) -> None:
        super().__init__(model, path)
        self.tokens = tokens

    def _tokens(self, obs):
        return self.tokens


_SAMPLE_MS: dict[tuple[str, str], tuple[float, float]] = {}


@pytest.mark.parametrize("path", ["policy", "vm_idm"])
@pytest.mark.parametrize("size", SIZES)
def test_sample_chunk(benchmark, size, path):
    """Latency of one 16-action chunk at batch 1 (``UVAPolicy.act``), encode included."""
    shared, _ = _shared(size)
    model = UVARoleModel(shared, init_state=None)
    policy = model.policy(path)
    obs = _obs()
    pre = _PreEncoded(model, path, policy._tokens(obs))
    generator = torch.Generator().manual_seed(0)

    def run():
        policy.act(obs, generator=generator)
        _sync()

    def net_only():
        pre.act(obs, generator=generator)
        _sync()

    run()  # warm-up
    benchmark.pedantic(run, rounds=ROUNDS[size], iterations=1)
    t0 = time.perf_counter()
    for _ in range(ROUNDS[size]):
        net_only()
    net_ms = (time.perf_counter() - t0) / ROUNDS[size] * 1e3
    act_ms = benchmark.stats["mean"] * 1e3
    _SAMPLE_MS[size, path] = (act_ms, net_ms)
    benchmark.extra_info.update(act_ms=round(act_ms, 1), net_ms=round(net_ms, 1),
                                encode_included=True,
                                sample_steps=shared.options.sample_steps)  # fmt: skip
    line = f"{act_ms:9.1f} ms/chunk incl. encoding 4 frames; network alone {net_ms:9.1f} ms"
    if path == "vm_idm" and (size, "policy") in _SAMPLE_MS:
        p_act, p_net = _SAMPLE_MS[size, "policy"]
        benchmark.extra_info.update(ratio_vm_idm_policy=round(act_ms / p_act, 2),
                                    ratio_vm_idm_policy_net=round(net_ms / p_net, 2))  # fmt: skip
        line += f"; vm_idm/policy {act_ms / p_act:.2f}x (network alone {net_ms / p_net:.2f}x)"
    _record(benchmark, f"sample {size} {path}", line)


@pytest.mark.parametrize("size", SIZES)
def test_encode(benchmark, size):
    """The frozen autoencoder's posterior mean for one call's 4 history frames."""
    shared, view = _shared(size)
    frames = torch.from_numpy(np.ascontiguousarray(view.frames[:4]))

    def run():
        shared.encode_images(frames)
        _sync()

    run()
    benchmark.pedantic(run, rounds=ROUNDS[size] + 2, iterations=1)
    per_frame = benchmark.stats["mean"] / len(frames) * 1e3
    benchmark.extra_info.update(ms_per_frame=round(per_frame, 2),
                                frames_per_s=round(1e3 / per_frame, 1))  # fmt: skip
    _record(benchmark, f"encode {size}", f"{per_frame:9.2f} ms/frame (batches of 4 frames)")


@pytest.mark.parametrize("size", ["small", "legacy", "paper"])
def test_parameters(benchmark, size):
    """Parameter counts of the network and the autoencoder (construction time, one round)."""
    o = OPTIONS[size]
    layout = layout_for(SPEC, o)
    built = {}

    def run():
        torch.manual_seed(0)
        built["vae"] = KLAutoencoder(
            o.vae_ch, o.vae_ch_mult, o.vae_blocks, o.latent_channels, o.vae_attention
        )
        built["net"] = network(layout, o)

    benchmark.pedantic(run, rounds=1, iterations=1)
    net, vae = built["net"], built["vae"]
    blocks = _count(net.encoder_blocks) + _count(net.decoder_blocks)
    counts = {
        "net": _count(net),
        "transformer_blocks": blocks,
        "video_head": _count(net.diffloss),
        "action_head": _count(net.action_head)
        + (_count(net.action_pool) if net.action_pool is not None else 0),
        "vae": _count(vae),
        "vae_encoder": _count(vae.encoder) + _count(vae.quant_conv),
    }
    benchmark.extra_info.update(counts)
    _record(benchmark, f"parameters {size}",
            ", ".join(f"{k} {v / 1e6:.3f}M" for k, v in counts.items()))  # fmt: skip


# --- LIBERO-10's inputs: the reference's setup (agent view, 10-number actions) against all --------
LIBERO_SETUPS = {
    "reference": {},  # inputs=auto -> main, actions=auto -> rotation_6d on libero10
    "all_native": {"inputs": "all", "actions": "native"},  # the setup before
}


@cache
def _libero_shared(setup: str) -> tuple[Shared, UnlabeledView]:
    from ssilbench_libero.environment import Libero10Options, Libero10Task

    spec = Libero10Task("bowl-drawer", Libero10Options()).spec
    frames = 64
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (frames, 128, 128, 3), dtype=np.uint8)
    extras = {"wrist": rng.integers(0, 256, (frames, 128, 128, 3), dtype=np.uint8),
              "proprio": rng.normal(size=(frames, 9)).astype(np.float32)}  # fmt: skip
    ends = np.array([frames // 2, frames], dtype=np.int64)
    index = np.setdiff1d(np.arange(frames), ends - 1)
    view = UnlabeledView(frames=images, index=index, extras=extras, episode_ends=ends)
    ctx = RunContext(config=None, spec=spec, labeled=None, unlabeled=view, video_model=None,
                     device=DEVICE, seed=0, plan=None, architectures=None,
                     evaluate=lambda policy: 0.0)  # fmt: skip
    options = UVAOptions(profile="small", vae_steps=0, **LIBERO_SETUPS[setup])
    return Shared(ctx, options), view


@pytest.mark.parametrize("mode", ["policy", "video"])
@pytest.mark.parametrize("setup", list(LIBERO_SETUPS))
def test_libero_train_step(benchmark, setup, mode):
    """``uva`` (small) on LIBERO-10's 128x128 frames: one mode's training step with the
    reference's inputs (64 tokens per frame, 10-number actions) or every input (the agent
    view and the wrist camera stacked: 128 tokens per frame, proprioception, 7 numbers).
    Frames, proprioception and labels are random (no timing depends on them)."""
    shared, view = _libero_shared(setup)
    batch, steps, lay = shared.options.batch_size, STEPS["small"], shared.layout
    _time_training(benchmark, shared, view, mode, steps, ROUNDS["small"])
    ms = benchmark.stats["mean"] / steps * 1e3
    # The fused layout's sequence: one token per future-frame patch of every camera.
    benchmark.extra_info.update(ms_per_step=round(ms, 1), tokens=lay.future_tokens,
                                action_dim=lay.action_dim, cameras=lay.cameras)  # fmt: skip
    _record(benchmark, f"libero train {setup} {mode}",
            f"{ms:8.0f} ms/step (batch {batch}; {lay.future_tokens} fused tokens, "
            f"{lay.cameras} camera(s), {lay.action_dim} action numbers)")  # fmt: skip


def test_libero_action_conversion(benchmark):
    """The reference setup's action conversion both ways for a minibatch of chunks (32 x 16):
    7 -> 10 numbers (axis-angle -> 6-D rotation) and back (Gram-Schmidt -> axis-angle)."""
    shared, _ = _libero_shared("reference")
    g = torch.Generator().manual_seed(0)
    actions = (2 * torch.rand(32, 16, 7, generator=g) - 1).to(DEVICE)

    def run():
        shared.denormalise_actions(shared.normalise_actions(actions))
        _sync()

    run()
    benchmark.pedantic(run, rounds=10, iterations=1)
    ms = benchmark.stats["mean"] * 1e3
    benchmark.extra_info.update(ms_both_ways=round(ms, 3))
    _record(benchmark, "libero action conversion", f"{ms:8.3f} ms both ways, 512 actions")
