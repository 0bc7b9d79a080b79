"""ssilbench against the paper's reference implementation, stage by stage: training throughput
(samples/s) of one optimiser step at batch 128 on 64x64x3 frames, paper model size.

The reference is LAPO (Schmidt & Jiang 2024, https://github.com/schmidtdominik/LAPO), which
the paper's Procgen code builds on, or the paper's fork of it
(https://github.com/sachaMorin/lapo-plus), both as published: the fork names its stages'
config keys ``lapo_stage1`` / ``lapo_stage2`` where LAPO has ``stage1`` / ``stage2``, and
both ``paths.py`` assert an ``expert_data/`` folder in the working directory (the reference is
imported from a scratch folder holding an empty one and its ``config.yaml``). Its code is
never copied here: point the environment variable at a checkout (the repository root or its
``lapo/`` folder) and it is imported from there at run time, e.g.

    SSILBENCH_LAPO_REFERENCE=/work/ref-lapo SSILBENCH_LAPO_REFERENCE_THREADS=1 \
    PYTHONPATH=/path/to/site-packages-with-tensordict-funcy-omegaconf-doy \
    OMP_NUM_THREADS=1 python -m pytest benchmarks/test_bench_lapo_reference.py -m slow

(the reference's packages are never ssilbench dependencies: put a folder holding only them
on PYTHONPATH, e.g. links to another virtual environment's copies, as docs/methods/lapo.md
shows). ssilbench's side trains as its stages do on the device (``speed_for``: on the CPU
float32 in channels-last, LAPO's default ``memory_format``; the baselines' stages contiguous).

Without the variable every case is skipped (CI has no reference). The reference imports
``tensordict``, ``funcy``, ``omegaconf`` and ``doy`` (needed: the case is skipped with their
names when they are missing, and with the missing module's name when any import of the
reference fails, e.g. ``tensordict`` installed without its own dependency ``pyvers``) and, at
module level only, ``wandb``, ``procgen`` and ``gym`` (replaced by empty stand-ins here when
they are not installed; nothing of them is used).

What one step is, on each side (each side's data path included: ssilbench gathers its batch
from uint8 frames on the device; the reference draws it from its own ``DataStager`` iterator):

=====================  ========================================  ===================================
stage                  ssilbench (its training functions,        reference (its models, optimiser
                       one step each)                            and per-step code)
=====================  ========================================  ===================================
world_model            ``optimise`` on ``WorldModel.loss``       ``stage1_idm.train_step``: IDM+VQ,
                       (latent IDM + VQ + U-Net), grad clip 2    U-Net WM, clip 2, AdamW (doy)
lapo latent_policy     ``fit_on_frames``, MSE to precomputed     ``stage2_bc`` loop: IDM labels the
                       latents                                   batch, policy MSE to them
lapo decoder           ``fit_classifier`` on precomputed         frozen policy forward on the
                       latents of the frozen latent policy       batch, then the (192, 128, 64)
                                                                 decoder
lapo_plus idm_decoder  ``fit_classifier`` on precomputed         frozen IDM forward on the batch,
                       latents of the frozen latent IDM          then the (192, 128, 64) decoder
lapo_plus policy       ``fit_on_frames``, soft CE to             frozen IDM + decoder label the
                       precomputed labels                        batch, policy soft CE
bc                     ``fit_classifier`` on float frames        ``Policy`` (IMPALA x4), CE
idm_labeling idm       ``fit_classifier`` on (s, s') pairs       ``Policy`` on 6 channels, CE
idm_labeling policy    ``fit_classifier`` to precomputed soft    frozen 6-channel IDM labels the
                       labels                                    batch, policy soft CE
=====================  ========================================  ===================================

The reference's models are built as in the paper (no pre-transition context:
``config.ADD_TIME_HORIZON = 0``, so its IDM sees (s, s') and its forward model s). Where
ssilbench labels a dataset once before a stage instead of at every step, the label pass is
timed too (``ssilbench_prepass``: the frozen networks' forward on 128 samples) and
``ssilbench_amortised_samples_per_s`` charges it at the paper's ratio of labeled samples to
trained samples (``prepass_ratio``: D_U = 2.6M transitions, 60k steps x 128 for D_U stages;
D_L at its largest, 2.6M, over 10k steps x 128 for the decoding stages, a worst case).

The two sides are timed interleaved (ABBA order over rounds) in one process so that they
see the same machine load; the medians go to ``benchmark.extra_info`` with the parameter
counts (trained and frozen) of each side.
"""

from __future__ import annotations

import os
import types
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from lapo_reference.harness import (
    ACTIONS,
    BATCH,
    DEVICE,
    ENV,
    FRAMES,
    OBS,
    compare,
    freeze,
    import_reference,
    param_count,
    reference_batches,
    reference_decoder,
    reference_policy,
    soft_ce,
    stage_lr,
)

from ssilbench.api import Stage
from ssilbench.data.batches import TransitionFrames
from ssilbench.data.split import UnlabeledView
from ssilbench.data.tensors import pair
from ssilbench.stages import StagePlan
from ssilbench.train.loop import optimise
from ssilbench.train.speed import Speed
from ssilbench.train.supervised import fit_classifier, fit_rows, predict_probs
from ssilbench_baselines.impala import Impala
from ssilbench_lapo.world_model import (
    WorldModel,
    WorldModelConfig,
    action_policy_net,
    decoder_net,
    impala_net,
    speed_for,
)

# The paper's Procgen run: 2.6M unlabeled transitions, 50k/60k/10k (LAPO), 50k/10k/60k
# (LAPO+), 60k/60k (IDM labeling) steps of batch 128.
PAPER_N = 2_600_000
D_U_RATIO = PAPER_N / (60_000 * BATCH)
D_L_RATIO = PAPER_N / (10_000 * BATCH)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference() -> types.SimpleNamespace:
    root = os.environ.get(ENV)
    if not root:
        pytest.skip(f"set {ENV} to a checkout of https://github.com/schmidtdominik/LAPO or "
                    "https://github.com/sachaMorin/lapo-plus to compare with the paper's "
                    "reference implementation")  # fmt: skip
    return import_reference(Path(root).expanduser().resolve())


@pytest.fixture(scope="module", autouse=True)
def _threads():
    wanted = os.environ.get("SSILBENCH_LAPO_REFERENCE_THREADS")
    before = torch.get_num_threads()
    if wanted:
        torch.set_num_threads(int(wanted))
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def frames() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (FRAMES + 1, *OBS), dtype=np.uint8)


# ---------------------------------------------------------------------------- ssilbench


def _budget():
    plan = StagePlan([Stage("stage", 1)], eval_every=10**9, evaluate=lambda policy: 0.0)
    return plan.stage("stage")


def _unlabeled(frames: np.ndarray) -> TransitionFrames:
    view = UnlabeledView(frames=frames, index=np.arange(FRAMES))
    return TransitionFrames(view, DEVICE, resident=True)


@torch.no_grad()
def in_chunks(fn, n: int, chunk: int = 1024) -> torch.Tensor:
    """``fn`` over consecutive row ranges, concatenated (inference over a whole set)."""
    return torch.cat([fn(slice(i, min(i + chunk, n))).float() for i in range(0, n, chunk)])


def fit_on_frames(net, data: TransitionFrames, targets, loss, budget, **kw) -> None:
    """A stage on the states of ``data``: the shared ``fit_rows`` the methods train with."""
    fit_rows("bench", net, data.inputs("obs"), targets, loss, budget, **kw)


def _cfg() -> WorldModelConfig:
    return WorldModelConfig(size="paper")


class _Seeds:
    """A fresh batch order for every one-step call (``optimise`` samples from its seed)."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> int:
        self.n += 1
        return self.n


# ---------------------------------------------------------------------------- timing


def test_world_model(benchmark, reference, frames):
    """Stage 1 of lapo and lapo_plus: latent IDM + VQ + forward model on D_U."""
    ref, cfg, data = reference, _cfg(), _unlabeled(frames)
    speed = speed_for(cfg, DEVICE)  # the stage's layout (CPU: channels-last) and precision
    model, seeds = speed.module(WorldModel(cfg, OBS).to(DEVICE)), _Seeds()

    def loss(rows):
        obs, next_obs = data.pairs(rows)
        with speed.autocast():
            return model.loss(speed.images(obs), speed.images(next_obs))

    def ours():
        optimise(model.parameters(), loss, len(data), _budget(), lr=cfg.world_model_lr,
                 batch_size=BATCH, seed=seeds(), clip_grad_norm=cfg.grad_clip)  # fmt: skip

    idm, wm = ref.utils.create_dynamics_models(ref.cfg.model)
    lr = stage_lr(ref, "stage1")
    schedule = ref.doy.PiecewiseLinearSchedule([0, 50, 50_001], [0.1 * lr, lr, 0.01 * lr])
    opt, lr_sched = ref.doy.LRScheduler.make(all=(schedule, [wm, idm]))
    batches, step = reference_batches(ref, frames), iter(range(1, 50_001))

    def theirs():  # stage1_idm.train_step without its logging
        idm.train()
        wm.train()
        lr_sched.step(next(step))
        batch = next(batches)
        vq_loss, _ = idm.label(batch)
        total = wm.label(batch) + vq_loss
        opt.zero_grad()
        total.backward()
        torch.nn.utils.clip_grad_norm_([*idm.parameters(), *wm.parameters()], 2)
        opt.step()

    params = {"ssilbench_idm_params": param_count(model.idm),
              "ssilbench_forward_model_params": param_count(model.forward_model),
              "reference_idm_params": param_count(idm),
              "reference_forward_model_params": param_count(wm)}  # fmt: skip
    compare(benchmark, ours, theirs, params=params)


def _world_idm(ref, cfg):
    """Frozen latent IDMs of both sides (untrained: only their cost matters here); ssilbench's
    in its stages' layout."""
    ours = speed_for(cfg, DEVICE).module(freeze(WorldModel(cfg, OBS).to(DEVICE))).idm
    theirs, _ = ref.utils.create_dynamics_models(ref.cfg.model)
    return ours, theirs


def test_lapo_latent_policy(benchmark, reference, frames):
    """LAPO stage 2: the latent policy regressed onto the latent IDM's latents of D_U."""
    ref, cfg, data = reference, _cfg(), _unlabeled(frames)
    our_idm, their_idm = _world_idm(ref, cfg)
    speed, seeds = speed_for(cfg, DEVICE), _Seeds()
    net = speed.module(impala_net(cfg, OBS, cfg.latent_dim).to(DEVICE))
    targets = in_chunks(lambda rows: _labels(speed, our_idm, data, rows), len(data))

    def ours():
        fit_on_frames(net, data, targets, F.mse_loss, _budget(), lr=cfg.lr, batch_size=BATCH,
                      seed=seeds(), speed=speed)  # fmt: skip

    def prepass():  # the latent IDM labels D_U once, before the stage
        in_chunks(lambda rows: _labels(speed, our_idm, data, rows), BATCH)

    policy = reference_policy(ref, OBS[0], ref.cfg.model.la_dim)
    lr = stage_lr(ref, "stage2")
    schedule = ref.doy.PiecewiseLinearSchedule([0, 1000, 60_001], [0.01 * lr, lr, 0])
    opt, lr_sched = ref.doy.LRScheduler.make(policy=(schedule, [policy]))
    their_idm.eval()
    batches, step = reference_batches(ref, frames), iter(range(1, 60_001))

    def theirs():  # the stage2_bc.py loop body without its logging
        lr_sched.step(next(step))
        policy.train()
        batch = next(batches)
        their_idm.label(batch)
        loss = F.mse_loss(policy(batch["obs"][:, -2]), batch["la"])
        opt.zero_grad()
        loss.backward()
        opt.step()

    params = _policy_params(net, our_idm, policy, their_idm)
    compare(benchmark, ours, theirs, params=params, prepass=prepass, prepass_ratio=D_U_RATIO)


def _labels(speed: Speed, idm, data: TransitionFrames, rows) -> torch.Tensor:
    """The latent IDM's latents of some transitions, as ``latents_of`` computes them."""
    obs, next_obs = data.pairs(rows)
    with speed.autocast():
        return idm(speed.images(obs), speed.images(next_obs))


def _policy_params(ours, our_frozen, theirs, their_frozen) -> dict[str, int]:
    """Parameter counts of a trained policy and the frozen model that labels its data."""
    return {
        "ssilbench_policy_params": param_count(ours),
        "ssilbench_frozen_params": param_count(our_frozen),
        "reference_policy_params": param_count(theirs),
        "reference_frozen_params": param_count(their_frozen),
    }


def _decoding(benchmark, ref, frames, *, ours_backbone, theirs_latent, frozen_params):
    """A decoding head (192, 128, 64) on a frozen backbone's 128-dim latents of D_L."""
    cfg, data = _cfg(), _unlabeled(frames)
    latents = in_chunks(ours_backbone(data), len(data))
    actions = torch.randint(0, ACTIONS, (len(data),), device=DEVICE)
    head, seeds = decoder_net(cfg, ACTIONS).to(DEVICE), _Seeds()

    def ours():
        fit_classifier(head, latents, actions, _budget(), lr=cfg.lr, batch_size=BATCH,
                       seed=seeds())  # fmt: skip

    def prepass():  # the frozen backbone's latents of D_L, once before the stage
        in_chunks(ours_backbone(data), BATCH)

    decoder = reference_decoder(ref)
    opt = torch.optim.AdamW(decoder.parameters(), lr=cfg.lr)
    batches = reference_batches(ref, frames)

    def theirs():
        batch = next(batches)
        with torch.no_grad():
            z = theirs_latent(batch)
        loss = F.cross_entropy(decoder(z), batch["ta"][:, -2])
        opt.zero_grad()
        loss.backward()
        opt.step()

    params = {"ssilbench_head_params": param_count(head),
              "reference_head_params": param_count(decoder), **frozen_params}  # fmt: skip
    compare(benchmark, ours, theirs, params=params, prepass=prepass, prepass_ratio=D_L_RATIO)


def test_lapo_decoder(benchmark, reference, frames):
    """LAPO stage 3: the decoding head on the frozen latent policy."""
    ref, cfg = reference, _cfg()
    speed = speed_for(cfg, DEVICE)
    ours = speed.module(freeze(impala_net(cfg, OBS, cfg.latent_dim).to(DEVICE)))
    theirs = freeze(reference_policy(ref, OBS[0], ref.cfg.model.la_dim))

    def ours_backbone(data):
        return lambda rows: speed.forward(ours, data.obs(rows))

    def theirs_latent(batch):
        return theirs(batch["obs"][:, -2])

    frozen = {"ssilbench_frozen_params": param_count(ours),
              "reference_frozen_params": param_count(theirs)}  # fmt: skip
    _decoding(benchmark, ref, frames, ours_backbone=ours_backbone, theirs_latent=theirs_latent,
              frozen_params=frozen)  # fmt: skip


def test_lapo_plus_idm_decoder(benchmark, reference, frames):
    """LAPO+ stage 2: the decoding head on the frozen latent IDM."""
    ref = reference
    our_idm, their_idm = _world_idm(ref, _cfg())
    their_idm.eval()
    speed = speed_for(_cfg(), DEVICE)

    def ours_backbone(data):
        return lambda rows: _labels(speed, our_idm, data, rows)

    def theirs_latent(batch):
        return their_idm(batch["obs"])[0]["la"]

    frozen = {"ssilbench_frozen_params": param_count(our_idm),
              "reference_frozen_params": param_count(their_idm)}  # fmt: skip
    _decoding(benchmark, ref, frames, ours_backbone=ours_backbone, theirs_latent=theirs_latent,
              frozen_params=frozen)  # fmt: skip


def test_lapo_plus_policy(benchmark, reference, frames):
    """LAPO+ stage 3: the policy cloned from the decoded latent IDM's soft labels of D_U."""
    ref, cfg, data = reference, _cfg(), _unlabeled(frames)
    our_idm, their_idm = _world_idm(ref, cfg)
    our_head = freeze(decoder_net(cfg, ACTIONS).to(DEVICE))
    speed, seeds = speed_for(cfg, DEVICE), _Seeds()

    def label(rows):
        return F.softmax(our_head(_labels(speed, our_idm, data, rows).float()), dim=-1)

    labels = in_chunks(label, len(data))
    net = speed.module(action_policy_net(cfg, OBS, ACTIONS).to(DEVICE))

    def ours():
        fit_on_frames(net, data, labels, soft_ce, _budget(), lr=cfg.lr, batch_size=BATCH,
                      seed=seeds(), speed=speed)  # fmt: skip

    def prepass():
        in_chunks(label, BATCH)

    their_idm.eval()
    their_head = freeze(reference_decoder(ref))
    policy = reference_policy(ref, OBS[0], ACTIONS)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr)
    batches = reference_batches(ref, frames)

    def theirs():
        policy.train()
        batch = next(batches)
        with torch.no_grad():
            target = F.softmax(their_head(their_idm(batch["obs"])[0]["la"]), dim=-1)
        loss = soft_ce(policy(batch["obs"][:, -2]), target)
        opt.zero_grad()
        loss.backward()
        opt.step()

    params = {"ssilbench_policy_params": param_count(net),
              "ssilbench_frozen_params": param_count(our_idm, our_head),
              "reference_policy_params": param_count(policy),
              "reference_frozen_params": param_count(their_idm, their_head)}  # fmt: skip
    compare(benchmark, ours, theirs, params=params, prepass=prepass, prepass_ratio=D_U_RATIO)


def _classifier(benchmark, ref, frames, *, channels: int):
    """An IMPALA classifier trained by cross-entropy on states (3) or (s, s') pairs (6)."""
    obs = torch.as_tensor(frames, device=DEVICE).float() / 255
    inputs = obs[:-1] if channels == 3 else pair(obs[:-1], obs[1:])
    actions = torch.randint(0, ACTIONS, (FRAMES,), device=DEVICE)
    net, seeds = Impala(scale=_cfg().scale).build((channels, 64, 64), ACTIONS), _Seeds()
    net.to(DEVICE)

    def ours():
        fit_classifier(net, inputs, actions, _budget(), lr=2e-4, batch_size=BATCH, seed=seeds())

    policy = reference_policy(ref, channels, ACTIONS)
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-4)
    batches = reference_batches(ref, frames)

    def theirs():
        policy.train()
        batch = next(batches)
        x = batch["obs"][:, -2] if channels == 3 else ref.models.merge_TC_dims(batch["obs"])
        loss = F.cross_entropy(policy(x), batch["ta"][:, -2])
        opt.zero_grad()
        loss.backward()
        opt.step()

    params = {"ssilbench_policy_params": param_count(net),
              "reference_policy_params": param_count(policy)}  # fmt: skip
    compare(benchmark, ours, theirs, params=params)


def test_bc(benchmark, reference, frames):
    """BC: the IMPALA policy on D_L's states."""
    _classifier(benchmark, reference, frames, channels=3)


def test_idm_labeling_idm(benchmark, reference, frames):
    """IDM labeling stage 1: the IMPALA IDM on D_L's (s, s') stacked as 6 channels."""
    _classifier(benchmark, reference, frames, channels=6)


def test_idm_labeling_policy(benchmark, reference, frames):
    """IDM labeling stage 2: the policy cloned from the frozen IDM's soft labels of D_U."""
    ref = reference
    obs = torch.as_tensor(frames, device=DEVICE).float() / 255
    pairs = pair(obs[:-1], obs[1:])
    scale = _cfg().scale
    our_idm = freeze(Impala(scale=scale).build((6, 64, 64), ACTIONS).to(DEVICE))
    labels = predict_probs(our_idm, pairs)
    net, seeds = Impala(scale=scale).build(OBS, ACTIONS).to(DEVICE), _Seeds()

    def ours():
        fit_classifier(net, obs[:-1], labels, _budget(), lr=2e-4, batch_size=BATCH, seed=seeds())

    def prepass():
        with torch.no_grad():
            predict_probs(our_idm, pairs[:BATCH])

    their_idm = freeze(reference_policy(ref, 6, ACTIONS))
    policy = reference_policy(ref, OBS[0], ACTIONS)
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-4)
    batches = reference_batches(ref, frames)

    def theirs():
        policy.train()
        batch = next(batches)
        with torch.no_grad():
            target = F.softmax(their_idm(ref.models.merge_TC_dims(batch["obs"])), dim=-1)
        loss = soft_ce(policy(batch["obs"][:, -2]), target)
        opt.zero_grad()
        loss.backward()
        opt.step()

    params = _policy_params(net, our_idm, policy, their_idm)
    compare(benchmark, ours, theirs, params=params, prepass=prepass, prepass_ratio=D_U_RATIO)
