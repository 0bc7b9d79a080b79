"""Vector quantisation of latent actions with EMA codebooks (van den Oord et al. 2017).

A latent of ``groups x per_group x dim`` numbers is read as ``groups x per_group`` vectors
of ``dim``; the vectors of group g are each replaced by their nearest entry of codebook g.
Gradients pass straight through the quantiser to the encoder, a commitment loss keeps the
encoder's outputs near their codes, and the codebooks follow the encoder by exponential
moving averages of the latents assigned to each code (no codebook gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

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
        restart_below: float = 0.1,
    ) -> None:
        super().__init__()
        self.groups, self.per_group, self.dim, self.size = groups, per_group, dim, size
        self.decay, self.eps, self.beta = decay, eps, commitment
        self.restart_below = restart_below
        # The EMA state is registered as parameters that never take part in a backward pass
        # (so Adam, which skips parameters without a gradient, leaves them alone): that way
        # the shared training loop's checkpoints carry the codebooks with the weights.
        self.codebook = nn.Parameter(torch.randn(groups, size, dim))
        self.ema_count = nn.Parameter(torch.zeros(groups, size))
        self.ema_sum = nn.Parameter(torch.zeros(groups, size, dim))
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
        vectors = z.float().view(len(z), self.groups, self.per_group, self.dim)
        with torch.no_grad():
            if self.training:
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
        self.codebook.copy_(torch.where(self.ema_steps == 0, first, self.codebook))

    def _ema_update(self, vectors: torch.Tensor, codes: torch.Tensor) -> None:
        onehot = F.one_hot(codes, self.size).to(vectors.dtype)  # (B, G, L, K)
        count = onehot.sum(dim=(0, 2))  # (G, K)
        total = torch.einsum("bglk,bgld->gkd", onehot, vectors)
        self.ema_count.mul_(self.decay).add_(count, alpha=1 - self.decay)
        self.ema_sum.mul_(self.decay).add_(total, alpha=1 - self.decay)
        self.ema_steps.add_(1)
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
        debias = 1 - self.decay**self.ema_steps
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
