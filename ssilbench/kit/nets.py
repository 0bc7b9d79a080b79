"""Network building blocks that several plugins build their own models from.

An *architecture* (a network family a method can be trained with, ``-c arch=NAME``) is
registered by a plugin and looked up by name (:func:`ssilbench.kit.architecture`). The blocks
here are not architectures but parts of them: the IMPALA-CNN encoder (Espeholt et al. 2018)
is the trunk of the ``impala`` architecture, of LAPO's latent models and of the Procgen PPO
expert, each with heads of its own.

The IMPALA encoder is three stages, each conv3x3 (pad 1) -> maxpool 3x3 stride 2 pad 1 -> two
residual blocks (relu-conv-relu-conv + skip), with (16, 32, 32) x ``scale`` channels; then
flatten -> ReLU -> Linear ``out_features`` -> ReLU. There are no normalisation layers, as in
the paper's Procgen experiments.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["IMPALA_CHANNELS", "ImpalaStage", "ImpalaTrunk", "ResidualBlock", "mlp"]

IMPALA_CHANNELS = (16, 32, 32)
"""Channels of the IMPALA encoder's three stages at scale 1."""


def _pooled(size: int) -> int:
    # maxpool 3x3 stride 2 pad 1 maps n pixels to ceil(n / 2)
    return (size + 1) // 2


class ResidualBlock(nn.Module):
    """x + conv(relu(conv(relu(x)))), channels unchanged."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # not in-place: the skip connection still needs x
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaStage(nn.Module):
    """conv3x3 -> maxpool 3x3/2 -> two residual blocks; halves the spatial size (rounding up)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.res0 = ResidualBlock(out_channels)
        self.res1 = ResidualBlock(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.res1(self.res0(self.pool(self.conv(x))))


class ImpalaTrunk(nn.Module):
    """The IMPALA encoder: (B, in_channels, H, W) float -> (B, out_features).

    H = W = 64 on Procgen (8x8 after the three stages). ``image_size`` only sizes the final
    linear layer, so smaller images (e.g. maze renders) work too.
    """

    def __init__(
        self,
        in_channels: int,
        scale: int = 4,
        out_features: int = 256,
        image_size: tuple[int, int] = (64, 64),
    ) -> None:
        super().__init__()
        if scale < 1:
            raise ValueError(f"IMPALA scale must be at least 1, got {scale}")
        channels = [c * scale for c in IMPALA_CHANNELS]
        stages, c = [], in_channels
        h, w = image_size
        for out_c in channels:
            stages.append(ImpalaStage(c, out_c))
            c, h, w = out_c, _pooled(h), _pooled(w)
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(c * h * w, out_features)
        self.out_features = out_features
        self.feature_shape = (c, h, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stages(x).flatten(1)
        return torch.relu(self.fc(torch.relu(x)))


def mlp(in_features: int, hidden: tuple[int, ...], out: int) -> nn.Sequential:
    """Linear-ReLU layers of widths ``hidden``, then a linear layer to ``out``."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_features, width), nn.ReLU()]
        in_features = width
    layers.append(nn.Linear(in_features, out))
    return nn.Sequential(*layers)
