"""bf16 autocast and channels-last convolutions on CUDA; float32 everywhere else.

Image networks at the paper's size train several times faster in bf16 on a GPU. On the CPU
runs keep float32, so that a run id gives bit-identical metrics there (see the guide).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class Speed:
    """Whether a stage trains with bf16 autocast and channels-last tensors (CUDA only)."""

    enabled: bool

    @classmethod
    def for_device(cls, wanted: bool, device: torch.device) -> Speed:
        return cls(wanted and device.type == "cuda")

    def autocast(self):
        if not self.enabled:
            return nullcontext()
        return torch.autocast("cuda", dtype=torch.bfloat16)

    def images(self, x: torch.Tensor) -> torch.Tensor:
        if not self.enabled or x.dim() != 4:
            return x
        return x.contiguous(memory_format=torch.channels_last)

    def module(self, net: nn.Module) -> nn.Module:
        return net.to(memory_format=torch.channels_last) if self.enabled else net

    def forward(self, net: nn.Module, x: torch.Tensor) -> torch.Tensor:
        """``net(x)`` under this speed setting; bf16 outputs come back as float32 (losses
        are taken in float32)."""
        if not self.enabled:
            return net(x)
        with self.autocast():
            return net(self.images(x)).float()


FLOAT32 = Speed(False)
