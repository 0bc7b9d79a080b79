"""Supervised building blocks shared by methods: tensors from views, fitting, policy wrappers.

Method modules stay readable top to bottom by composing these: a method says *what* is fitted
on *which* data; this module says *how* a classifier or regressor is fitted.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ssilbench.api import Architecture, EnvSpec, Policy, VideoModel
from ssilbench.data.split import LabeledView, UnlabeledView
from ssilbench.data.tensors import as_model_input, pair, pair_shape
from ssilbench.train.budget import StageBudget
from ssilbench.train.loop import StoppingRule, optimise
from ssilbench.train.memo import reusable, stage_key
from ssilbench.train.schedule import WarmupLinear


def labeled_tensors(view: LabeledView, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(s, a, s') of D_L as tensors on ``device``."""
    actions = torch.as_tensor(np.asarray(view.actions), dtype=torch.long, device=device)
    return as_model_input(view.obs(), device), actions, as_model_input(view.next_obs(), device)


def unlabeled_tensors(view: UnlabeledView, device: torch.device) -> tuple[torch.Tensor, ...]:
    """(s, s') of D_U as tensors on ``device``."""
    return as_model_input(view.obs(), device), as_model_input(view.next_obs(), device)


def fit_classifier(
    net: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    budget: StageBudget,
    *,
    lr: float,
    batch_size: int,
    seed: int,
    rule: StoppingRule | None = None,
    schedule: WarmupLinear | None = None,
) -> float:
    """Cross-entropy to hard labels (long targets) or to distributions (float targets)."""
    soft = targets.is_floating_point()

    def loss(rows):
        logits = net(inputs[rows])
        if soft:
            return -(targets[rows] * F.log_softmax(logits, dim=-1)).sum(-1).mean()
        return F.cross_entropy(logits, targets[rows])

    wanted = targets.argmax(-1) if soft else targets

    def accuracy() -> float:
        return float((net(inputs).argmax(-1) == wanted).float().mean())

    return _reused_or_optimised("classifier", net, inputs, targets, budget, loss, accuracy,
                                lr=lr, batch_size=batch_size, seed=seed, rule=rule,
                                schedule=schedule)  # fmt: skip


def _reused_or_optimised(trainer, net, inputs, targets, budget, loss, accuracy, *, lr,
                         batch_size, seed, rule, schedule=None) -> float:  # fmt: skip
    """``optimise``, or the weights of the identical stage trained before (its last loss is
    then unknown: NaN); a stage trained here is kept for reuse (``ssilbench.train.memo``)."""
    cache = reusable(budget)
    if cache is not None:
        key = stage_key(cache, trainer, net, inputs, targets, budget, lr=lr,
                        batch_size=batch_size, seed=seed, rule=rule, schedule=schedule)  # fmt: skip
        if cache.restore(key, net, budget):
            return float("nan")
    last = optimise(
        net.parameters(), loss, len(inputs), budget, lr=lr, batch_size=batch_size, seed=seed,
        rule=rule, accuracy_fn=accuracy, schedule=schedule,
    )  # fmt: skip
    if cache is not None:
        cache.save(key, net, budget)
    return last


def fit_regressor(
    net: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    budget: StageBudget,
    *,
    lr: float,
    batch_size: int,
    seed: int,
    rule: StoppingRule | None = None,
    schedule: WarmupLinear | None = None,
) -> float:
    """Mean squared error of ``net(inputs)`` (flattened) to ``targets`` (flattened)."""

    def loss(rows):
        return F.mse_loss(net(inputs[rows]), targets[rows].flatten(1))

    return _reused_or_optimised("regressor", net, inputs, targets, budget, loss, None, lr=lr,
                                batch_size=batch_size, seed=seed, rule=rule,
                                schedule=schedule)  # fmt: skip


@torch.no_grad()
def predict_probs(net: nn.Module, inputs: torch.Tensor, chunk: int = 8192) -> torch.Tensor:
    """Softmax outputs of a classifier over a large input tensor, in chunks."""
    return torch.cat(
        [F.softmax(net(inputs[i : i + chunk]), dim=-1) for i in range(0, len(inputs), chunk)]
    )


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
