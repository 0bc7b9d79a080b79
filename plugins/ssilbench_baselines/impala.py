"""The IMPALA-CNN (Espeholt et al. 2018) as the paper uses it on Procgen (appendix "ProcGen
Experiments"), and the ``impala`` architecture built on it.

Three stages, each conv3x3 (pad 1) -> maxpool 3x3 stride 2 pad 1 -> two residual blocks
(relu-conv-relu-conv + skip), with (16, 32, 32) x ``scale`` channels; then flatten -> ReLU ->
Linear ``out_features`` -> ReLU. There are no normalisation layers, as in the paper.

The ``impala`` architecture puts the paper's action decoder, an MLP (128, 128), on top of
the trunk. Optimiser defaults: Adam lr 2e-4 and batch min(128, N), the paper's Procgen
settings. ``impala_small`` is the same at scale 1, for CPU runs.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import nn

from ssilbench.api import Architecture
from ssilbench.train.schedule import WarmupLinear

BASE_CHANNELS = (16, 32, 32)


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
    """(B, in_channels, H, W) float -> (B, out_features); H = W = 64 on Procgen (8x8 at the end).

    ``image_size`` only sizes the final linear layer, so smaller images (e.g. maze renders)
    work too.
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
        channels = [c * scale for c in BASE_CHANNELS]
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


PROCGEN_SCHEDULE = WarmupLinear(start=0.01, warmup=1000 / 60_000, end=0.0)


class Impala(Architecture):
    description = "IMPALA-CNN (16,32,32)x4, FC 256, action decoder MLP (128,128)"
    input_kinds = ("image",)
    lr = 2e-4
    # The paper's Procgen stages: 1% of the rate rising to all of it over the first 1,000
    # of 60,000 steps, then linear decay to zero.
    lr_schedule = PROCGEN_SCHEDULE
    scale: ClassVar[int] = 4
    features: ClassVar[int] = 256
    decoder: ClassVar[tuple[int, ...]] = (128, 128)

    def __init__(self, scale: int | None = None) -> None:
        # The registry builds architectures with no arguments (class defaults); a method that
        # needs another width, e.g. a small model for CPU tests, passes ``scale``.
        if scale is not None:
            self.scale = scale

    def trunk(self, in_shape: tuple[int, ...]) -> ImpalaTrunk:
        """The IMPALA encoder alone for inputs of ``in_shape`` (C, H, W)."""
        if len(in_shape) != 3:
            raise ValueError(f"impala needs (channels, height, width) images, got {in_shape}")
        c, h, w = in_shape
        return ImpalaTrunk(c, self.scale, self.features, image_size=(h, w))

    def build(self, in_shape: tuple[int, ...], out: int) -> nn.Module:
        return nn.Sequential(self.trunk(in_shape), mlp(self.features, self.decoder, out))

    def batch_size(self, n: int) -> int:
        return min(128, n)


class ImpalaSmall(Impala):
    description = "IMPALA-CNN at scale 1 (16,32,32), FC 256, action decoder MLP (128,128)"
    scale = 1


class ImpalaBF16(Impala):
    """``impala`` trained with bf16 autocast and channels-last tensors on CUDA (the paper's
    code trains in float32; float32 on the CPU either way)."""

    description = "IMPALA-CNN x4 as impala, in bf16 with channels-last on CUDA"
    fast_cuda = True
