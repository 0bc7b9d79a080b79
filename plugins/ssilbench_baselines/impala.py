"""The ``impala`` architectures: the IMPALA-CNN (Espeholt et al. 2018) as the paper uses it on
Procgen (appendix "ProcGen Experiments").

The encoder is the core's shared block ``ssilbench.kit.ImpalaTrunk`` (three conv-pool-residual
stages of (16, 32, 32) x ``scale`` channels, then FC 256). On top of it the ``impala``
architecture puts the paper's code's head, the same networks as its LAPO: a linear layer to
128 (the policy's latent width), then its decoder, an MLP (192, 128, 64). ``impala_mlp``
puts the head the paper's text describes instead, an MLP (128, 128). Optimiser defaults:
Adam lr 2e-4 and batch min(128, N), the paper's Procgen settings. ``impala_small`` is
``impala`` at scale 1, for CPU runs.
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from ssilbench.api import Architecture
from ssilbench.kit import ImpalaTrunk, WarmupLinear, mlp

PROCGEN_SCHEDULE = WarmupLinear(start=0.01, warmup=1000 / 60_000, end=0.0)


class Impala(Architecture):
    description = "IMPALA-CNN (16,32,32)x4, FC 256, linear 128, action decoder MLP (192,128,64)"
    input_kinds = ("image",)
    lr = 2e-4
    # The paper's Procgen stages: 1% of the rate rising to all of it over the first 1,000
    # of 60,000 steps, then linear decay to zero.
    lr_schedule = PROCGEN_SCHEDULE
    scale: ClassVar[int] = 4
    features: ClassVar[int] = 256
    latent: ClassVar[int | None] = 128
    """Width of the linear layer between the trunk and the decoder, with no activation after
    it (the reference's policy head to its latent action); None: the decoder reads the trunk."""
    decoder: ClassVar[tuple[int, ...]] = (192, 128, 64)

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
        if self.latent is None:
            return nn.Sequential(self.trunk(in_shape), mlp(self.features, self.decoder, out))
        to_latent = nn.Linear(self.features, self.latent)
        return nn.Sequential(self.trunk(in_shape), to_latent, *mlp(self.latent, self.decoder, out))

    def batch_size(self, n: int) -> int:
        return min(128, n)


class ImpalaSmall(Impala):
    description = "IMPALA-CNN at scale 1 (16,32,32), FC 256, linear 128, decoder (192,128,64)"
    scale = 1


class ImpalaMLP(Impala):
    """``impala`` with the head of the paper's text (appendix "ProcGen Experiments"): an MLP
    (128, 128) on the trunk's 256 features."""

    description = "IMPALA-CNN (16,32,32)x4, FC 256, action decoder MLP (128,128)"
    latent = None
    decoder = (128, 128)


class ImpalaBF16(Impala):
    """``impala`` trained with bf16 autocast and channels-last tensors on CUDA (the paper's
    code trains in float32; float32 on the CPU either way)."""

    description = "IMPALA-CNN x4 as impala, in bf16 with channels-last on CUDA"
    fast_cuda = True
