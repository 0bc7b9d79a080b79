"""``continuous``: the built-in network for continuous actions, so that a continuous-action
method needs no architecture of its own.

Vector observations go through an MLP (2 x 256, ReLU); images (channels first) through
three strided 3x3 convolutions (32, 64, 64 channels, ReLU) and a global average pool, then
the same MLP. The ``out`` outputs end in tanh: actions scaled to [-1, 1]
(``ssilbench.kit.unit_actions`` gives the targets, ``ssilbench.kit.ContinuousPolicy``
scales them back to the task's bounds).
"""

from __future__ import annotations

import math

from torch import nn

from ssilbench.api import Architecture
from ssilbench.kit import mlp


class ContinuousHead(Architecture):
    description = "MLP 2x256 (vectors) or 3 strided convs + average pool (images), tanh outputs"
    input_kinds = ("vector", "image")
    action_kinds = ("continuous",)
    lr = 1e-3
    hidden = (256, 256)
    channels = (32, 64, 64)

    def build(self, in_shape: tuple[int, ...], out: int) -> nn.Module:
        if len(in_shape) == 3:
            layers: list[nn.Module] = []
            c = in_shape[0]
            for width in self.channels:
                layers += [nn.Conv2d(c, width, 3, stride=2, padding=1), nn.ReLU()]
                c = width
            trunk = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
            return nn.Sequential(trunk, mlp(c, self.hidden, out), nn.Tanh())
        return nn.Sequential(nn.Flatten(), mlp(math.prod(in_shape), self.hidden, out), nn.Tanh())

    def batch_size(self, n: int) -> int:
        return min(256, n)
