"""The paper's maze architectures (appendix "Architectures"), with its optimiser defaults.

LC and 5L MLP: Adam lr 1e-3, batch min(512, N) — full batch on D_L up to 512 transitions as
in the complexity study, and the stochastic-expert study's min(512, |D_U|) on D_U.
1L CNN and 5L CNN: Adam lr 1e-4, batch min(32, N).

Initialisation is the paper's code's: Xavier-uniform weights and zero biases for the 5L MLP
and both CNNs, PyTorch's default for the linear classifier (LC).
"""

from __future__ import annotations

import math

from torch import nn

from ssilbench.api import Architecture
from ssilbench_baselines.conv_max import ConvGlobalMax
from ssilbench_baselines.distinct_rows import RowwiseSequential


def xavier(net: nn.Module) -> nn.Module:
    """Xavier-uniform weights and zero biases for every linear and convolution layer."""
    for layer in net.modules():
        if isinstance(layer, nn.Linear | nn.Conv2d):
            nn.init.xavier_uniform_(layer.weight)
            if layer.bias is not None:
                nn.init.zeros_(layer.bias)
    return net


class _DenseDefaults(Architecture):
    lr = 1e-3

    def batch_size(self, n: int) -> int:
        return min(512, n)


class LinearClassifier(_DenseDefaults):
    description = "softmax(W x + b)"
    input_kinds = ("vector",)

    def build(self, in_shape: tuple[int, ...], out: int) -> nn.Module:
        return RowwiseSequential(nn.Flatten(), nn.Linear(math.prod(in_shape), out))


class MLP5(_DenseDefaults):
    description = "5 hidden layers x 100 units, ReLU"
    input_kinds = ("vector", "image")
    hidden = 100
    depth = 5

    def build(self, in_shape: tuple[int, ...], out: int) -> nn.Module:
        layers: list[nn.Module] = [nn.Flatten()]
        width = math.prod(in_shape)
        for _ in range(self.depth):
            layers += [nn.Linear(width, self.hidden), nn.ReLU()]
            width = self.hidden
        layers.append(nn.Linear(width, out))
        return xavier(RowwiseSequential(*layers))


class CNN1(Architecture):
    description = "conv3x3 (no padding) to `out` channels, global max-pool"
    input_kinds = ("image",)
    min_image_size = (3, 3)  # one unpadded 3x3 convolution
    lr = 1e-4

    def build(self, in_shape: tuple[int, ...], out: int) -> nn.Module:
        return xavier(ConvGlobalMax(in_shape[0], out, kernel=3))

    def batch_size(self, n: int) -> int:
        return min(32, n)


class CNN5(Architecture):
    description = "3 x (conv3x3-128 pad 1, ReLU, maxpool 2), FC 128, FC 128, linear"
    input_kinds = ("image",)
    min_image_size = (8, 8)  # three 2x2 max-pools
    lr = 1e-4
    channels = 128

    def build(self, in_shape: tuple[int, ...], out: int) -> nn.Module:
        c, h, w = in_shape
        layers: list[nn.Module] = []
        for _ in range(3):
            layers += [nn.Conv2d(c, self.channels, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
            c, h, w = self.channels, h // 2, w // 2
        if h == 0 or w == 0:
            raise ValueError(f"cnn5 needs images of at least 8x8 pixels, got {in_shape[1:]}")
        layers += [
            nn.Flatten(),
            nn.Linear(c * h * w, 128),
            nn.ReLU(),
            nn.Linear(128, 128),
            nn.ReLU(),
            nn.Linear(128, out),
        ]
        return xavier(nn.Sequential(*layers))

    def batch_size(self, n: int) -> int:
        return min(32, n)
