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

import contextlib
import importlib
import importlib.util
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

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

ENV = "SSILBENCH_LAPO_REFERENCE"
DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
BATCH = 128
FRAMES = 1024
ACTIONS = 15
OBS = (3, 64, 64)
ROUNDS = int(os.environ.get("SSILBENCH_LAPO_REFERENCE_ROUNDS", "3"))
# The paper's Procgen run: 2.6M unlabeled transitions, 50k/60k/10k (LAPO), 50k/10k/60k
# (LAPO+), 60k/60k (IDM labeling) steps of batch 128.
PAPER_N = 2_600_000
D_U_RATIO = PAPER_N / (60_000 * BATCH)
D_L_RATIO = PAPER_N / (10_000 * BATCH)
# The reference's own modules, imported by these bare names from its lapo/ folder.
REFERENCE_MODULES = ("config", "env_utils", "paths", "data_loader", "models", "utils")
REQUIRED = ("tensordict", "funcy", "omegaconf", "doy")
STUBBED = ("wandb", "procgen", "gym")

pytestmark = pytest.mark.slow


# ---------------------------------------------------------------------------- the reference


@contextlib.contextmanager
def _scratch_cwd(lapo: Path) -> Iterator[None]:
    """A scratch working directory holding the reference's ``config.yaml`` and an empty
    ``expert_data/``: the reference reads the one and its ``paths.py`` asserts the other
    relative to the working directory; nothing is written into the checkout."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="lapo-reference-") as scratch:
        shutil.copy(lapo / "config.yaml", scratch)
        (Path(scratch) / "expert_data").mkdir()
        os.chdir(scratch)
        try:
            yield
        finally:
            os.chdir(before)


def _stub(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__doc__ = "stand-in: the LAPO reference imports it at module level only"

    def unavailable(*args, **kwargs):
        raise RuntimeError(f"{name} is a stand-in here (benchmarks/test_bench_lapo_reference.py)")

    module.init = unavailable  # wandb.init
    module.ProcgenEnv = unavailable  # procgen.ProcgenEnv
    return module


def _import_reference(root: Path) -> types.SimpleNamespace:
    """The reference's config, models, utils and data_loader modules, imported from ``root``
    without leaving its generic module names (config, utils, ...) in ``sys.modules``."""
    lapo = root / "lapo" if (root / "lapo" / "models.py").exists() else root
    if not (lapo / "models.py").exists():
        pytest.skip(f"{ENV}={root}: no LAPO checkout there (expected lapo/models.py)")
    missing = [m for m in REQUIRED if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the LAPO reference needs {', '.join(missing)} (pip install them, or put "
                    "a folder with them on PYTHONPATH)")  # fmt: skip
    saved = {name: sys.modules.pop(name) for name in REFERENCE_MODULES if name in sys.modules}
    stubs = [name for name in STUBBED if importlib.util.find_spec(name) is None]
    for name in stubs:
        sys.modules[name] = _stub(name)
    sys.path.insert(0, str(lapo))
    try:
        with _scratch_cwd(lapo), contextlib.redirect_stdout(sys.stderr):
            modules = {name: importlib.import_module(name) for name in REFERENCE_MODULES}
            cfg = modules["config"].get(use_cli_args=False, override_args=["exp_name=bench"])
    except ImportError as exc:
        # e.g. tensordict installed, its own dependency pyvers not
        pytest.skip(f"importing the LAPO reference from {lapo} failed: {exc} (pip install "
                    f"{exc.name or 'the missing package'}, or put it on PYTHONPATH)")  # fmt: skip
    finally:
        sys.path.remove(str(lapo))
        for name in (*REFERENCE_MODULES, *stubs):
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    ref = types.SimpleNamespace(**modules, doy=importlib.import_module("doy"), cfg=cfg, path=lapo)
    ref.config.ADD_TIME_HORIZON = 0  # the paper's setting: no pre-transition context
    ref.config.DEVICE = str(DEVICE)
    return ref


@pytest.fixture(scope="module")
def reference() -> types.SimpleNamespace:
    root = os.environ.get(ENV)
    if not root:
        pytest.skip(f"set {ENV} to a checkout of https://github.com/schmidtdominik/LAPO or "
                    "https://github.com/sachaMorin/lapo-plus to compare with the paper's "
                    "reference implementation")  # fmt: skip
    return _import_reference(Path(root).expanduser().resolve())


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


def _reference_batches(ref, frames: np.ndarray) -> Iterator:
    """The reference's own batch path (``DataStager.get_iter``: shuffled (s, s') windows of a
    uint8 TensorDict, moved to the device and scaled to [-0.5, 0.5]) over ``frames``."""
    data_loader = ref.data_loader
    td = data_loader._create_tensordict(len(frames), OBS[0])
    td["obs"][:] = torch.from_numpy(frames)
    td["ta"][:] = torch.randint(0, ACTIONS, (len(frames),))
    stager = data_loader.DataStager.__new__(data_loader.DataStager)  # no files to load
    stager.seq_len, stager.obs_depth, stager.td = 2, OBS[0], td
    stager.td_unfolded = data_loader._unfold_td(td, 2)
    return stager.get_iter(BATCH, device=str(DEVICE))


def _reference_policy(ref, in_channels: int, out: int) -> torch.nn.Module:
    return ref.utils.create_policy(ref.cfg.model, out, policy_in_depth=in_channels)


def _stage_lr(ref, stage: str) -> float:
    """A stage's learning rate under the checkout's key: ``lapo_stage1`` in the fork,
    ``stage1`` in LAPO."""
    for key in (f"lapo_{stage}", stage):
        if key in ref.cfg:
            return ref.cfg[key].lr
    raise KeyError(f"the reference's config.yaml has neither lapo_{stage} nor {stage}")


def _reference_decoder(ref) -> torch.nn.Module:
    # the fork's config gives the decoder's widths, (192, 128, 64); LAPO's create_decoder
    # defaults to (128, 128) and its stage 3 script passes (192, 128, 64)
    hidden = ref.cfg.model.get("decoder_hidden_sizes") or (192, 128, 64)
    return ref.utils.create_decoder(ref.cfg.model.la_dim, ACTIONS, device=str(DEVICE),
                                    hidden_sizes=tuple(hidden))  # fmt: skip


def _frozen(net: torch.nn.Module) -> torch.nn.Module:
    return net.eval().requires_grad_(False)


def _soft_ce(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return -(target * F.log_softmax(logits, dim=-1)).sum(-1).mean()


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


def _params(*nets: torch.nn.Module) -> int:
    return sum(p.numel() for net in nets for p in net.parameters())


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def _compare(
    benchmark,
    ours: Callable[[], None],
    theirs: Callable[[], None],
    *,
    params: dict[str, int],
    prepass: Callable[[], None] | None = None,
    prepass_ratio: float = 0.0,
) -> None:
    """Times ``ours`` and ``theirs`` (one step of BATCH samples each) interleaved, ABBA."""
    sides = {"ssilbench": ours, "reference": theirs}
    if prepass is not None:
        sides["ssilbench_prepass"] = prepass
    for fn in sides.values():  # warm-up: allocator, kernels, lazy initialisation, Adam state
        fn()
        _sync()
    times: dict[str, list[float]] = {name: [] for name in sides}
    order = list(sides)

    def one_round() -> None:
        for name in order:
            start = time.perf_counter()
            sides[name]()
            _sync()
            times[name].append(time.perf_counter() - start)
        order.reverse()

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    ours_rate = BATCH / median["ssilbench"]
    ref_rate = BATCH / median["reference"]
    info = benchmark.extra_info
    info["device"] = str(DEVICE)
    info["threads"] = torch.get_num_threads()
    info["rounds"] = ROUNDS
    info["ssilbench_samples_per_s"] = round(ours_rate, 1)
    info["reference_samples_per_s"] = round(ref_rate, 1)
    info["ratio"] = round(ours_rate / ref_rate, 2)
    info["ssilbench_step_s"] = [round(t, 4) for t in times["ssilbench"]]
    info["reference_step_s"] = [round(t, 4) for t in times["reference"]]
    if prepass is not None:
        per_sample = (median["ssilbench"] + prepass_ratio * median["ssilbench_prepass"]) / BATCH
        info["ssilbench_prepass_samples_per_s"] = round(BATCH / median["ssilbench_prepass"], 1)
        info["prepass_ratio"] = round(prepass_ratio, 3)
        info["ssilbench_amortised_samples_per_s"] = round(1 / per_sample, 1)
        info["amortised_ratio"] = round(1 / per_sample / ref_rate, 2)
    info.update(params)


# ---------------------------------------------------------------------------- the stages


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
    lr = _stage_lr(ref, "stage1")
    schedule = ref.doy.PiecewiseLinearSchedule([0, 50, 50_001], [0.1 * lr, lr, 0.01 * lr])
    opt, lr_sched = ref.doy.LRScheduler.make(all=(schedule, [wm, idm]))
    batches, step = _reference_batches(ref, frames), iter(range(1, 50_001))

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

    params = {"ssilbench_idm_params": _params(model.idm),
              "ssilbench_forward_model_params": _params(model.forward_model),
              "reference_idm_params": _params(idm),
              "reference_forward_model_params": _params(wm)}  # fmt: skip
    _compare(benchmark, ours, theirs, params=params)


def _world_idm(ref, cfg):
    """Frozen latent IDMs of both sides (untrained: only their cost matters here); ssilbench's
    in its stages' layout."""
    ours = speed_for(cfg, DEVICE).module(_frozen(WorldModel(cfg, OBS).to(DEVICE))).idm
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

    policy = _reference_policy(ref, OBS[0], ref.cfg.model.la_dim)
    lr = _stage_lr(ref, "stage2")
    schedule = ref.doy.PiecewiseLinearSchedule([0, 1000, 60_001], [0.01 * lr, lr, 0])
    opt, lr_sched = ref.doy.LRScheduler.make(policy=(schedule, [policy]))
    their_idm.eval()
    batches, step = _reference_batches(ref, frames), iter(range(1, 60_001))

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
    _compare(benchmark, ours, theirs, params=params, prepass=prepass, prepass_ratio=D_U_RATIO)


def _labels(speed: Speed, idm, data: TransitionFrames, rows) -> torch.Tensor:
    """The latent IDM's latents of some transitions, as ``latents_of`` computes them."""
    obs, next_obs = data.pairs(rows)
    with speed.autocast():
        return idm(speed.images(obs), speed.images(next_obs))


def _policy_params(ours, our_frozen, theirs, their_frozen) -> dict[str, int]:
    """Parameter counts of a trained policy and the frozen model that labels its data."""
    return {
        "ssilbench_policy_params": _params(ours),
        "ssilbench_frozen_params": _params(our_frozen),
        "reference_policy_params": _params(theirs),
        "reference_frozen_params": _params(their_frozen),
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

    decoder = _reference_decoder(ref)
    opt = torch.optim.AdamW(decoder.parameters(), lr=cfg.lr)
    batches = _reference_batches(ref, frames)

    def theirs():
        batch = next(batches)
        with torch.no_grad():
            z = theirs_latent(batch)
        loss = F.cross_entropy(decoder(z), batch["ta"][:, -2])
        opt.zero_grad()
        loss.backward()
        opt.step()

    params = {"ssilbench_head_params": _params(head), "reference_head_params": _params(decoder),
              **frozen_params}  # fmt: skip
    _compare(benchmark, ours, theirs, params=params, prepass=prepass, prepass_ratio=D_L_RATIO)


def test_lapo_decoder(benchmark, reference, frames):
    """LAPO stage 3: the decoding head on the frozen latent policy."""
    ref, cfg = reference, _cfg()
    speed = speed_for(cfg, DEVICE)
    ours = speed.module(_frozen(impala_net(cfg, OBS, cfg.latent_dim).to(DEVICE)))
    theirs = _frozen(_reference_policy(ref, OBS[0], ref.cfg.model.la_dim))

    def ours_backbone(data):
        return lambda rows: speed.forward(ours, data.obs(rows))

    def theirs_latent(batch):
        return theirs(batch["obs"][:, -2])

    frozen = {"ssilbench_frozen_params": _params(ours), "reference_frozen_params": _params(theirs)}
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

    frozen = {"ssilbench_frozen_params": _params(our_idm),
              "reference_frozen_params": _params(their_idm)}  # fmt: skip
    _decoding(benchmark, ref, frames, ours_backbone=ours_backbone, theirs_latent=theirs_latent,
              frozen_params=frozen)  # fmt: skip


def test_lapo_plus_policy(benchmark, reference, frames):
    """LAPO+ stage 3: the policy cloned from the decoded latent IDM's soft labels of D_U."""
    ref, cfg, data = reference, _cfg(), _unlabeled(frames)
    our_idm, their_idm = _world_idm(ref, cfg)
    our_head = _frozen(decoder_net(cfg, ACTIONS).to(DEVICE))
    speed, seeds = speed_for(cfg, DEVICE), _Seeds()

    def label(rows):
        return F.softmax(our_head(_labels(speed, our_idm, data, rows).float()), dim=-1)

    labels = in_chunks(label, len(data))
    net = speed.module(action_policy_net(cfg, OBS, ACTIONS).to(DEVICE))

    def ours():
        fit_on_frames(net, data, labels, _soft_ce, _budget(), lr=cfg.lr, batch_size=BATCH,
                      seed=seeds(), speed=speed)  # fmt: skip

    def prepass():
        in_chunks(label, BATCH)

    their_idm.eval()
    their_head = _frozen(_reference_decoder(ref))
    policy = _reference_policy(ref, OBS[0], ACTIONS)
    opt = torch.optim.AdamW(policy.parameters(), lr=cfg.lr)
    batches = _reference_batches(ref, frames)

    def theirs():
        policy.train()
        batch = next(batches)
        with torch.no_grad():
            target = F.softmax(their_head(their_idm(batch["obs"])[0]["la"]), dim=-1)
        loss = _soft_ce(policy(batch["obs"][:, -2]), target)
        opt.zero_grad()
        loss.backward()
        opt.step()

    params = {"ssilbench_policy_params": _params(net),
              "ssilbench_frozen_params": _params(our_idm, our_head),
              "reference_policy_params": _params(policy),
              "reference_frozen_params": _params(their_idm, their_head)}  # fmt: skip
    _compare(benchmark, ours, theirs, params=params, prepass=prepass, prepass_ratio=D_U_RATIO)


def _classifier(benchmark, ref, frames, *, channels: int):
    """An IMPALA classifier trained by cross-entropy on states (3) or (s, s') pairs (6)."""
    obs = torch.as_tensor(frames, device=DEVICE).float() / 255
    inputs = obs[:-1] if channels == 3 else pair(obs[:-1], obs[1:])
    actions = torch.randint(0, ACTIONS, (FRAMES,), device=DEVICE)
    net, seeds = Impala(scale=_cfg().scale).build((channels, 64, 64), ACTIONS), _Seeds()
    net.to(DEVICE)

    def ours():
        fit_classifier(net, inputs, actions, _budget(), lr=2e-4, batch_size=BATCH, seed=seeds())

    policy = _reference_policy(ref, channels, ACTIONS)
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-4)
    batches = _reference_batches(ref, frames)

    def theirs():
        policy.train()
        batch = next(batches)
        x = batch["obs"][:, -2] if channels == 3 else ref.models.merge_TC_dims(batch["obs"])
        loss = F.cross_entropy(policy(x), batch["ta"][:, -2])
        opt.zero_grad()
        loss.backward()
        opt.step()

    params = {"ssilbench_policy_params": _params(net), "reference_policy_params": _params(policy)}
    _compare(benchmark, ours, theirs, params=params)


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
    our_idm = _frozen(Impala(scale=scale).build((6, 64, 64), ACTIONS).to(DEVICE))
    labels = predict_probs(our_idm, pairs)
    net, seeds = Impala(scale=scale).build(OBS, ACTIONS).to(DEVICE), _Seeds()

    def ours():
        fit_classifier(net, obs[:-1], labels, _budget(), lr=2e-4, batch_size=BATCH, seed=seeds())

    def prepass():
        with torch.no_grad():
            predict_probs(our_idm, pairs[:BATCH])

    their_idm = _frozen(_reference_policy(ref, 6, ACTIONS))
    policy = _reference_policy(ref, OBS[0], ACTIONS)
    opt = torch.optim.AdamW(policy.parameters(), lr=2e-4)
    batches = _reference_batches(ref, frames)

    def theirs():
        policy.train()
        batch = next(batches)
        with torch.no_grad():
            target = F.softmax(their_idm(ref.models.merge_TC_dims(batch["obs"])), dim=-1)
        loss = _soft_ce(policy(batch["obs"][:, -2]), target)
        opt.zero_grad()
        loss.backward()
        opt.step()

    params = _policy_params(net, our_idm, policy, their_idm)
    _compare(benchmark, ours, theirs, params=params, prepass=prepass, prepass_ratio=D_U_RATIO)
