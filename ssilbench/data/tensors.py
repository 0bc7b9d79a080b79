"""Conversion of stored observations to model inputs, shared by training and evaluation."""

from __future__ import annotations

import numpy as np
import torch


def as_model_input(obs: np.ndarray, device: torch.device | str = "cpu") -> torch.Tensor:
    """Stored frames -> float32 tensor; uint8 pixels are scaled to [0, 1].

    Training batches and rollouts both go through here, so a model always sees one scale.
    """
    tensor = torch.as_tensor(np.asarray(obs), device=device)
    if tensor.dtype == torch.uint8:
        return tensor.float().div_(255.0)
    return tensor.float()


def pair(obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
    """(s, s') stacked on the feature/channel axis: 2d numbers or 2C channels (IDM input)."""
    return torch.cat([obs, next_obs], dim=1)


def pair_shape(obs_shape: tuple[int, ...]) -> tuple[int, ...]:
    """The input shape of a model that sees (s, s') stacked by :func:`pair`."""
    return (2 * obs_shape[0], *obs_shape[1:])
