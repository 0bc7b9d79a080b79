"""Continuous actions: their scaling to [-1, 1] and a policy over a regression network.

A network with bounded outputs (the built-in ``continuous`` architecture ends in tanh)
predicts actions scaled to [-1, 1] per dimension; :func:`unit_actions` scales a task's
actions (within ``spec.action_low`` .. ``spec.action_high``) to its targets, and
:class:`ContinuousPolicy` scales the predictions back when the rollout asks for actions.
``docs/plugin-authors.md`` ("Walk-through: a continuous-action method") builds a method
from these and ``fit_regressor``.
"""

from __future__ import annotations

import torch
from torch import nn

from ssilbench.api import EnvSpec, Policy


def action_bounds(spec: EnvSpec, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(low, high) of a continuous task's actions as float tensors on ``device``."""
    if spec.action_kind != "continuous" or len(spec.action_low) != spec.num_actions:
        raise ValueError(
            f"{spec.env_id} has no continuous action bounds (action_kind "
            f"{spec.action_kind!r}, {len(spec.action_low)} bounds for {spec.num_actions} "
            "dimensions)"
        )
    low = torch.tensor(spec.action_low, dtype=torch.float32, device=device)
    high = torch.tensor(spec.action_high, dtype=torch.float32, device=device)
    return low, high


def unit_actions(actions: torch.Tensor, spec: EnvSpec) -> torch.Tensor:
    """A task's actions, shape (..., num_actions) within its bounds, scaled to [-1, 1] per
    dimension: regression targets for a network with outputs in [-1, 1]."""
    low, high = action_bounds(spec, actions.device)
    return (2 * (actions.float() - low) / (high - low) - 1).clamp(-1.0, 1.0)


class ContinuousPolicy(Policy):
    """Acts with ``net``, which maps a batch of observations to actions scaled to [-1, 1]:
    ``num_actions`` numbers, or ``action_chunk x num_actions`` for a task that executes
    chunks (``spec.action_chunk > 1``). :meth:`act` returns them within the task's
    bounds, shape (batch, num_actions) or (batch, action_chunk, num_actions); the policy is
    deterministic, so greedy and sampled evaluations agree."""

    def __init__(self, net: nn.Module, spec: EnvSpec) -> None:
        self.net = net
        self.spec = spec

    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        raise TypeError(f"{self.spec.env_id} has continuous actions: a policy over them has "
                        "no action probabilities (use act)")  # fmt: skip

    def act(self, obs, greedy: bool = True, generator: torch.Generator | None = None):
        with torch.no_grad():
            unit = self.net(obs).float().clamp(-1.0, 1.0)
        low, high = action_bounds(self.spec, unit.device)
        if self.spec.action_chunk > 1:
            unit = unit.reshape(len(unit), self.spec.action_chunk, self.spec.num_actions)
        return low + (unit + 1) / 2 * (high - low)
