"""Transitions as device tensors built once, and the per-step machinery LAPO's stages share.

A view's frames are gathered once into one tensor in their stored dtype (uint8 pixels stay
uint8: a quarter of the memory of floats, and each frame is held once even though it is the
s' of one transition and the s of the next). A minibatch is then two index lookups and a
scale on the device, with no Python loop over samples.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from ssilbench.data.split import LabeledView, UnlabeledView
from ssilbench.train.budget import StageBudget
from ssilbench.train.loop import StoppingRule, optimise
from ssilbench.train.schedule import WarmupLinear

Rows = slice | np.ndarray


@dataclass
class TransitionFrames:
    """The (s, s') pairs of a view: ``frames[index]`` and ``frames[index + 1]``."""

    frames: torch.Tensor
    index: torch.Tensor
    digest: str = field(default="", compare=False)
    """sha256 of the frames and the index, computed once where they were gathered (the
    stage cache keys of every stage trained on these transitions include it)."""

    @classmethod
    def from_view(cls, view: LabeledView | UnlabeledView) -> TransitionFrames:
        """The frames the view's transitions touch, on the CPU (move with :meth:`to`)."""
        start = np.asarray(view.index, dtype=np.int64)
        used = np.unique(np.concatenate([start, start + 1]))
        frames = np.asarray(view.frames[used])
        frames = np.ascontiguousarray(frames)
        index = np.searchsorted(used, start)
        h = hashlib.sha256(f"{frames.dtype}|{frames.shape}|".encode())
        h.update(memoryview(frames).cast("B"))
        h.update(index.astype(np.int64).tobytes())
        return cls(torch.from_numpy(frames), torch.from_numpy(index), h.hexdigest())

    def to(self, device: torch.device) -> TransitionFrames:
        return TransitionFrames(self.frames.to(device), self.index.to(device), self.digest)

    def __len__(self) -> int:
        return len(self.index)

    def _float(self, frames: torch.Tensor) -> torch.Tensor:
        # the same scaling as ssilbench.data.tensors.as_model_input, on the device
        if frames.dtype == torch.uint8:
            return frames.float().div_(255.0)
        return frames.float()

    def _rows(self, rows: Rows) -> torch.Tensor:
        if isinstance(rows, slice):
            return self.index[rows]
        return self.index[torch.as_tensor(rows, device=self.index.device)]

    def obs(self, rows: Rows = slice(None)) -> torch.Tensor:
        return self._float(self.frames[self._rows(rows)])

    def pairs(self, rows: Rows = slice(None)) -> tuple[torch.Tensor, torch.Tensor]:
        at = self._rows(rows)
        return self._float(self.frames[at]), self._float(self.frames[at + 1])


@dataclass(frozen=True)
class Speed:
    """bf16 autocast and channels-last convolutions, on CUDA only (CPU keeps float32 so that
    runs stay bit-reproducible there)."""

    enabled: bool

    @classmethod
    def for_device(cls, wanted: bool, device: torch.device) -> Speed:
        return cls(wanted and device.type == "cuda")

    def autocast(self):
        if not self.enabled:
            return nullcontext()
        return torch.autocast("cuda", dtype=torch.bfloat16)

    def images(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if self.enabled else x

    def module(self, net: nn.Module) -> nn.Module:
        return net.to(memory_format=torch.channels_last) if self.enabled else net


@torch.no_grad()
def in_chunks(fn: Callable[[Rows], torch.Tensor], n: int, chunk: int = 4096) -> torch.Tensor:
    """``fn`` applied to consecutive row ranges, concatenated (inference over a large set)."""
    return torch.cat([fn(slice(i, min(i + chunk, n))).float() for i in range(0, n, chunk)])


@contextmanager
def evaluating(*nets: nn.Module) -> Iterator[None]:
    """Nets in eval mode for the block, back to their previous mode after it."""
    modes = [net.training for net in nets]
    for net in nets:
        net.eval()
    try:
        yield
    finally:
        for net, mode in zip(nets, modes, strict=True):
            net.train(mode)


def fit_on_frames(
    net: nn.Module,
    data: TransitionFrames,
    targets: torch.Tensor,
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    budget: StageBudget,
    *,
    lr: float,
    batch_size: int,
    seed: int,
    speed: Speed,
    rule: StoppingRule | None = None,
    schedule: WarmupLinear | None = None,
) -> None:
    """``loss(net(s), target)`` minimised over the states of ``data`` by the shared loop
    (checkpoints, stopping rule); the full loss the rule needs is taken in chunks."""

    def batch_loss(rows: Rows) -> torch.Tensor:
        with speed.autocast():
            out = net(speed.images(data.obs(rows)))
        return loss(out.float(), targets[rows])

    def loss_fn(rows: Rows) -> torch.Tensor:
        if torch.is_grad_enabled() or not isinstance(rows, slice):
            return batch_loss(rows)
        # the stopping rule's full training loss: a weighted mean over chunks
        n, chunk = len(data), 4096
        total = sum(batch_loss(slice(i, i + chunk)) * min(chunk, n - i) for i in range(0, n, chunk))
        return total / n

    optimise(net.parameters(), loss_fn, len(data), budget, lr=lr, batch_size=batch_size,
             seed=seed, rule=rule, schedule=schedule)  # fmt: skip
