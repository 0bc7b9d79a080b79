"""Supervised building blocks shared by methods: inputs from views, fitting, policy wrappers.

Method modules stay readable top to bottom by composing these: a method says *what* is fitted
on *which* data; this module says *how* a classifier or regressor is fitted. Inputs and
targets are row sources (``ssilbench.data.batches``): a tensor, or the frames of a view
read per minibatch, so a stage on 2.6M Procgen transitions never holds them as floats.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Unpack

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ssilbench.api import Architecture, EnvSpec, Policy, VideoModel
from ssilbench.data.batches import (
    ArrayRows,
    RowSource,
    TransitionFrames,
    chunk_rows,
    chunks,
    row_bytes,
)
from ssilbench.data.split import LabeledView, UnlabeledView
from ssilbench.data.tensors import pair, pair_shape
from ssilbench.stages import StageBudget, StoppingRule, WarmupLinear
from ssilbench.train.artifacts import cached_rows
from ssilbench.train.loop import optimise
from ssilbench.train.memo import FitSettings, StageCache, reusable, stage_key
from ssilbench.train.speed import FLOAT32, Speed


def speed_of(arch: Architecture, device: torch.device) -> Speed:
    """How an architecture's networks train on ``device`` (bf16 on CUDA where it says so)."""
    return Speed.for_device(arch.fast_cuda, device)


def labeled_actions(view: LabeledView, device: torch.device) -> torch.Tensor:
    """The actions of D_L as a tensor on ``device`` (N_L of them: always small): integers
    (long) for discrete actions, float32 vectors for continuous ones."""
    actions = np.asarray(view.actions)
    dtype = torch.float32 if np.issubdtype(actions.dtype, np.floating) else torch.long
    return torch.as_tensor(actions, dtype=dtype, device=device)


def labeled_tensors(view: LabeledView, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(s, a, s') of D_L as whole float tensors on ``device``: for small views only (every
    built-in method reads :class:`TransitionFrames` per minibatch instead)."""
    frames = TransitionFrames(view, device)
    s, s_next = frames.pairs()
    return s, labeled_actions(view, device), s_next


def unlabeled_tensors(view: UnlabeledView, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(s, s') of D_U as whole float tensors on ``device``: for small views only."""
    return TransitionFrames(view, device).pairs()


def fit_classifier(
    net: nn.Module,
    inputs: RowSource,
    targets: RowSource,
    budget: StageBudget,
    **fit: Unpack[FitSettings],
) -> float:
    """Cross-entropy to hard labels (integer targets) or to distributions (float targets);
    ``fit`` as :func:`fit_rows` takes it."""
    soft = targets.is_floating_point()
    speed = fit.get("speed", FLOAT32)

    def loss(logits: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
        if soft:
            return -(wanted * F.log_softmax(logits, dim=-1)).sum(-1).mean()
        return F.cross_entropy(logits, wanted)

    @torch.no_grad()
    def accuracy() -> float:
        right = 0.0
        for rows in chunks(len(inputs), chunk_rows(row_bytes(inputs))):
            wanted = targets[rows]
            wanted = wanted.argmax(-1) if soft else wanted
            right += float((speed.forward(net, inputs[rows]).argmax(-1) == wanted).sum())
        return right / len(inputs)

    return fit_rows("classifier", net, inputs, targets, loss, budget, accuracy=accuracy, **fit)


def fit_regressor(
    net: nn.Module,
    inputs: RowSource,
    targets: RowSource,
    budget: StageBudget,
    **fit: Unpack[FitSettings],
) -> float:
    """Mean squared error of ``net(inputs)`` (flattened) to ``targets`` (flattened); ``fit``
    as :func:`fit_rows` takes it."""

    def loss(out: torch.Tensor, wanted: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(out, wanted.flatten(1))

    return fit_rows("regressor", net, inputs, targets, loss, budget, **fit)


def fit_rows(
    trainer: str,
    net: nn.Module,
    inputs: RowSource,
    targets: RowSource,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    budget: StageBudget,
    *,
    lr: float,
    batch_size: int,
    seed: int,
    rule: StoppingRule | None = None,
    schedule: WarmupLinear | None = None,
    speed: Speed = FLOAT32,
    accuracy: Callable[[], float] | None = None,
) -> float:
    """``loss(net(inputs[rows]), targets[rows])`` minimised by the shared loop, or the
    weights of the identical stage trained before restored from the stage cache (its last
    loss is then unknown: NaN). Minibatches of streamed inputs are read ahead while the
    current one trains; the stopping rule's full loss is taken in chunks."""
    n = len(inputs)

    def batch_loss(rows) -> torch.Tensor:
        return loss(speed.forward(net, inputs[rows]), targets[rows])

    def loss_fn(rows) -> torch.Tensor:
        if torch.is_grad_enabled() or not isinstance(rows, slice):
            return batch_loss(rows)
        return full_mean(batch_loss, n, chunk_rows(row_bytes(inputs)))

    def prefetch(rows) -> None:
        for source in (inputs, targets):
            ahead = getattr(source, "prefetch", None)
            if ahead is not None:
                ahead(rows)

    def train() -> float:
        return optimise(net.parameters(), loss_fn, n, budget, lr=lr, batch_size=batch_size,
                        seed=seed, rule=rule, accuracy_fn=accuracy, schedule=schedule,
                        prefetch=prefetch)  # fmt: skip

    cache = reusable(budget)
    if cache is None:
        return train()
    key = stage_key(cache, trainer, net, inputs, targets, budget, lr=lr, batch_size=batch_size,
                    seed=seed, rule=rule, schedule=schedule, speed=speed)  # fmt: skip
    last = float("nan")

    def trained() -> None:
        nonlocal last
        last = train()

    cache.once(key, net, budget, trained)
    return last


def full_mean(batch_loss: Callable[[slice], torch.Tensor], n: int, size: int) -> torch.Tensor:
    """The mean loss over all ``n`` rows, taken over chunks of ``size`` rows (one pass when
    they fit in one, so that the value is the same as ``batch_loss(slice(None))``)."""
    if n <= size:
        return batch_loss(slice(None))
    return sum(batch_loss(c) * (c.stop - c.start) for c in chunks(n, size)) / n


@torch.no_grad()
def predict(
    net: nn.Module, inputs: RowSource, speed: Speed = FLOAT32, softmax: bool = False
) -> torch.Tensor:
    """``net`` over every row of ``inputs`` in chunks (a small result: latents of D_L, say)."""
    parts = []
    for rows in chunks(len(inputs), chunk_rows(row_bytes(inputs))):
        out = speed.forward(net, inputs[rows])
        parts.append(F.softmax(out, dim=-1) if softmax else out)
    return torch.cat(parts)


def predict_probs(net: nn.Module, inputs: RowSource, speed: Speed = FLOAT32) -> torch.Tensor:
    """Softmax outputs of a classifier over every row of ``inputs``, in chunks."""
    return predict(net, inputs, speed, softmax=True)


def label_rows(
    cache: StageCache | None,
    net: nn.Module,
    inputs: RowSource,
    device: torch.device,
    speed: Speed = FLOAT32,
    probs: bool = True,
) -> ArrayRows:
    """``net``'s softmax (``probs``) or raw outputs (latents) over every row of ``inputs``,
    computed once: kept in the stage cache under the hash of the frozen network's weights
    and the inputs, so every run that uses the same network on the same data (the IDM of a
    run and of its retry, the soft- and hard-label variants of one IDM, LAPO's world model
    for every lapo and lapo_plus run of a game) reads them instead of computing them again.
    Hard labels are ``ArgmaxRows`` of the probabilities."""

    def compute(rows: slice) -> torch.Tensor:
        out = speed.forward(net, inputs[rows])
        return F.softmax(out, dim=-1) if probs else out

    return cached_rows(cache, "probs" if probs else "outputs", [net], inputs, compute,
                       {"fast": speed.enabled}, device)  # fmt: skip


class SelectFeatures(nn.Module):
    """Keeps some features of a vector input (e.g. everything but the goal)."""

    def __init__(self, index: list[int]) -> None:
        super().__init__()
        self.register_buffer("index", torch.as_tensor(index, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.index_select(1, self.index)


def build_net(
    arch: Architecture, spec: EnvSpec, out: int, paired: bool = False, use_goal: bool = True
) -> nn.Module:
    """A network on observations (or (s, s') pairs when ``paired``) with ``out`` outputs.

    With ``use_goal=False`` the environment's goal features are left out of the input, the
    way the paper contrasts BC with goal-conditioned BC_G.
    """
    shape = pair_shape(spec.obs_shape) if paired else spec.obs_shape
    if use_goal or not spec.goal_dims:
        return arch.build(shape, out)
    dim = spec.obs_shape[0]
    keep = [i for i in range(dim) if i not in spec.goal_dims]
    if paired:
        keep += [dim + i for i in keep]
    return nn.Sequential(SelectFeatures(keep), arch.build((len(keep),), out))


class ClassifierPolicy(Policy):
    """pi(a | s) = softmax(net(s)); ``idm`` is the IDM it was distilled from, if any."""

    def __init__(self, net: nn.Module, idm: nn.Module | None = None) -> None:
        self.net = net
        self.idm = idm

    @torch.no_grad()
    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.net(obs), dim=-1)

    @torch.no_grad()
    def idm_probs(self, obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor | None:
        return None if self.idm is None else F.softmax(self.idm(pair(obs, next_obs)), dim=-1)


class RegressionVideoModel(VideoModel):
    """A learned deterministic video model: s' = s + net(s) reshaped to the state's shape."""

    def __init__(self, net: nn.Module, obs_shape: tuple[int, ...]) -> None:
        self.net = net
        self.obs_shape = obs_shape

    def __call__(self, obs: torch.Tensor) -> torch.Tensor:
        return obs + self.net(obs).view(-1, *self.obs_shape)

    @torch.no_grad()
    def predict(self, obs: torch.Tensor) -> torch.Tensor:
        return self(obs)


class VMIDMPolicy(Policy):
    """pi(a | s) = sum_k p_k h(a | s, s'_k) over the video model's outcomes s'_k.

    For a deterministic video model this is h(a | s, v(s)); for a stochastic one (e.g. a
    maze whose agent stays put with probability p) it is the paper's closed form.
    """

    def __init__(self, idm: nn.Module, video_model: VideoModel) -> None:
        self.idm = idm
        self.video_model = video_model

    @torch.no_grad()
    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        total = None
        for prob, next_obs in self.video_model.outcomes(obs):
            term = prob[:, None] * F.softmax(self.idm(pair(obs, next_obs)), dim=-1)
            total = term if total is None else total + term
        return total

    @torch.no_grad()
    def idm_probs(self, obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        return F.softmax(self.idm(pair(obs, next_obs)), dim=-1)
