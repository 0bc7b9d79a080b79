"""Vector quantisation of latent actions with EMA codebooks (van den Oord et al. 2017).

A latent of ``groups x per_group x dim`` numbers is read as ``groups x per_group`` vectors
of ``dim``; the vectors of group g are each replaced by their nearest entry of codebook g.
Gradients pass straight through the quantiser to the encoder, a commitment loss keeps the
encoder's outputs near their codes, and the codebooks follow the encoder by exponential
moving averages of the latents assigned to each code (no codebook gradient).

The defaults are LAPO's reference quantiser: codebooks drawn uniformly in +-5/size, the EMA
of counts (Laplace-smoothed in place) and of sums started from the codebook itself, every
code set to its sum over its count at each step, and no restarts. ssilbench's variant is
reachable through the options: codebooks started from the first batch's latents
(``init="data"``), bias-corrected averages from zero under which a code never chosen keeps
its value (``bias_correction=True``), and dead-code restarts (``restart_below > 0``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class Quantised:
    latent: torch.Tensor
    """The quantised latent with straight-through gradients to the input, shape (B, D)."""
    commitment: torch.Tensor
    """beta * ||z - sg(q)||^2 (mean), the encoder's pull toward its codes."""
    codes: torch.Tensor
    """The code chosen for each vector, shape (B, groups, per_group)."""


class VectorQuantiser(nn.Module):
    """EMA vector quantiser over ``groups`` codebooks of ``size`` entries of ``dim`` numbers."""

    def __init__(
        self,
        groups: int,
        per_group: int,
        dim: int,
        size: int,
        decay: float = 0.999,
        eps: float = 1e-5,
        commitment: float = 0.05,
        restart_below: float = 0.0,
        init: Literal["uniform", "data"] = "uniform",
        bias_correction: bool = False,
    ) -> None:
        super().__init__()
        if init not in ("uniform", "data"):
            raise ValueError(f"codebook init must be 'uniform' or 'data', got {init!r}")
        self.groups, self.per_group, self.dim, self.size = groups, per_group, dim, size
        self.decay, self.eps, self.beta = decay, eps, commitment
        self.restart_below, self.init, self.bias_correction = restart_below, init, bias_correction
        # The EMA state is registered as parameters that never take part in a backward pass
        # (so Adam, which skips parameters without a gradient, leaves them alone): that way
        # the shared training loop's checkpoints carry the codebooks with the weights.
        if init == "uniform":
            book = torch.empty(groups, size, dim).uniform_(-5 / size, 5 / size)
        else:  # overwritten by the first batch's latents
            book = torch.randn(groups, size, dim)
        self.codebook = nn.Parameter(book)
        self.ema_count = nn.Parameter(torch.zeros(groups, size))
        # The reference starts the EMA of sums at the codebook (so that sum / count is the
        # codebook scaled by decay / count); bias-corrected averages start from zero.
        self.ema_sum = nn.Parameter(torch.zeros_like(book) if bias_correction else book.clone())
        self.ema_steps = nn.Parameter(torch.zeros(1))

    @property
    def latent_dim(self) -> int:
        return self.groups * self.per_group * self.dim

    def forward(self, z: torch.Tensor) -> Quantised:
        # Distances and running averages in float32 even under bf16 autocast: nearby codes
        # would tie, and EMA sums would lose their small increments.
        with torch.autocast(z.device.type, enabled=False):
            return self._quantise(z)

    def _quantise(self, z: torch.Tensor) -> Quantised:
        # at least float32 (float64 stays: the parity tests compare in it)
        wide = z if z.dtype == torch.float64 else z.float()
        vectors = wide.view(len(z), self.groups, self.per_group, self.dim)
        with torch.no_grad():
            if self.training and self.init == "data":
                self._start_from(vectors)
            codes = self._nearest(vectors)
            chosen = self._lookup(codes)
            if self.training:
                self._ema_update(vectors, codes)
                if self.restart_below > 0:
                    self._restart_dead_codes(vectors)
        commitment = self.beta * F.mse_loss(vectors, chosen)
        latent = vectors + (chosen - vectors).detach()  # straight-through estimator
        return Quantised(latent.view(len(z), -1).to(z.dtype), commitment, codes)

    def _nearest(self, vectors: torch.Tensor) -> torch.Tensor:
        book = self.codebook.detach()
        # ||v - e||^2 without the ||v||^2 term, which does not change the argmin
        scores = (book * book).sum(-1)[None, :, None, :] - 2 * torch.einsum(
            "bgld,gkd->bglk", vectors, book
        )
        return scores.argmin(-1)

    def _lookup(self, codes: torch.Tensor) -> torch.Tensor:
        group = torch.arange(self.groups, device=codes.device)[None, :, None]
        return self.codebook.detach()[group, codes]

    def _start_from(self, vectors: torch.Tensor) -> None:
        # Codebooks drawn at random lie far from an untrained encoder's outputs, which then
        # all pick one code and stay there (collapse). Starting from the first batch's own
        # vectors avoids it; evenly spaced rather than random picks keep the stage a pure
        # function of its inputs (it is cached and shared across runs). A no-op after the
        # first step, written without a branch so that no step waits for the device.
        per_group = vectors.transpose(0, 1).reshape(self.groups, -1, self.dim)
        pick = torch.linspace(0, per_group.shape[1] - 1, self.size, device=vectors.device)
        first = per_group[:, pick.round().long()]
        first = torch.where(self.ema_steps == 0, first, self.codebook)
        self.codebook.copy_(first)
        if not self.bias_correction:
            self.ema_sum.copy_(torch.where(self.ema_steps == 0, first, self.ema_sum))

    def _ema_update(self, vectors: torch.Tensor, codes: torch.Tensor) -> None:
        onehot = F.one_hot(codes, self.size).to(vectors.dtype)  # (B, G, L, K)
        count = onehot.sum(dim=(0, 2))  # (G, K)
        total = torch.einsum("bglk,bgld->gkd", onehot, vectors)
        self.ema_count.mul_(self.decay).add_(count, alpha=1 - self.decay)
        self.ema_sum.mul_(self.decay).add_(total, alpha=1 - self.decay)
        self.ema_steps.add_(1)
        if not self.bias_correction:
            # The reference: the smoothed counts replace the counts, and every code becomes
            # its sum over its count, chosen or not (an unchosen code's small smoothed count
            # sends it far away, where it stays unused).
            n = self.ema_count.sum(-1, keepdim=True)
            self.ema_count.copy_((self.ema_count + self.eps) / (n + self.size * self.eps) * n)
            self.codebook.copy_(self.ema_sum / self.ema_count[..., None])
            return
        # Dividing by 1 - decay^t removes the averages' bias toward their zero start; the
        # Laplace smoothing keeps rarely used codes from dividing by (almost) zero.
        debias = 1 - self.decay**self.ema_steps
        count_avg = self.ema_count / debias
        n = count_avg.sum(-1, keepdim=True)
        smoothed = (count_avg + self.eps) / (n + self.size * self.eps) * n
        means = (self.ema_sum / debias) / smoothed[..., None]
        used = (self.ema_count > 0)[..., None]  # a code never chosen keeps its initial value
        self.codebook.copy_(torch.where(used, means, self.codebook))

    def _restart_dead_codes(self, vectors: torch.Tensor) -> None:
        # The encoder moves fast early on and leaves most codes behind; one code then takes
        # every latent and the latent action carries nothing. A code used less than
        # ``restart_below`` times its fair share (EMA) restarts at a batch vector its
        # codebook represents worst (the k-th dead code at the k-th worst), with a fair share
        # of EMA mass so that it is not restarted again at once. Worst-first rather than
        # random keeps the stage deterministic; masks rather than branches keep the device
        # from waiting on the host.
        # Without bias correction the stored counts are the averages themselves.
        debias = (
            1 - self.decay**self.ema_steps
            if self.bias_correction
            else torch.ones_like(self.ema_steps)
        )
        count_avg = self.ema_count / debias
        fair = count_avg.sum(-1, keepdim=True) / self.size  # (G, 1)
        dead = count_avg < self.restart_below * fair  # (G, K)
        per_group = vectors.transpose(0, 1).reshape(self.groups, -1, self.dim)  # (G, N, D)
        error = torch.cdist(per_group, self.codebook.detach()).amin(-1)  # (G, N)
        worst = error.argsort(dim=-1, descending=True)
        rank = (dead.long().cumsum(-1) - 1).clamp(0, worst.shape[1] - 1)  # (G, K)
        source = worst.gather(1, rank)
        fresh = per_group.gather(1, source[..., None].expand(-1, -1, self.dim))  # (G, K, D)
        mass = (fair * debias).expand_as(self.ema_count)
        self.codebook.copy_(torch.where(dead[..., None], fresh, self.codebook))
        self.ema_count.copy_(torch.where(dead, mass, self.ema_count))
        self.ema_sum.copy_(torch.where(dead[..., None], fresh * mass[..., None], self.ema_sum))
