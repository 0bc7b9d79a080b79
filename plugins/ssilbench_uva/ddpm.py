"""The reference's diffusion for UVA's heads (``diffusion=ddpm``): the Gaussian diffusion of
DiT and improved DDPM that the UVA code trains its video and action heads with.

- Schedule: the cosine schedule as betas, beta_i = min(1 - f((i+1)/T) / f(i/T), 0.999) with
  f(t) = cos((t + 0.008) / 1.008 * pi/2)^2, everything derived from it in float64.
- The head predicts the noise and, per dimension, a number v in [-1, 1] that places the
  log-variance of each reverse step between the posterior's (v = -1) and beta's (v = 1).
- Loss per row: the noise MSE plus the variational bound in bits (the KL between the true
  posterior and the model's step, or at t = 0 the discretised Gaussian likelihood), the bound
  seeing the noise prediction frozen, so that it trains the variance only.
- Sampling: ancestral DDPM over ``count`` of the T steps (evenly spaced and rounded, the
  schedule respaced through their cumulative alphas), each step's noise scaled by a
  temperature; x0 estimates optionally clipped.

Per-step coefficients are computed in float64 and applied in float32, as the reference does.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch

Denoiser = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
"""net(x_t, timesteps, condition) -> (N, 2 C): the noise, then the variance numbers."""


def cosine_betas(steps: int, max_beta: float = 0.999) -> np.ndarray:
    def f(t: float) -> float:
        return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2

    return np.array([min(1 - f((i + 1) / steps) / f(i / steps), max_beta)
                     for i in range(steps)], dtype=np.float64)  # fmt: skip


def respaced(steps: int, count: int) -> list[int]:
    """The ``count`` timesteps of ``steps`` that sampling visits: evenly spaced from 0 to
    steps - 1, each position rounded half to even as it accumulates."""
    if count >= steps:
        return list(range(steps))
    stride = (steps - 1) / (count - 1) if count > 1 else 1.0
    kept, position = set(), 0.0
    for _ in range(count):
        kept.add(round(position))
        position += stride
    return sorted(kept)


class Schedule:
    """A chain of betas and what the reverse process needs of it, with the original
    timestep each of its steps stands for (the network is conditioned on that one)."""

    def __init__(self, betas: np.ndarray, timesteps: list[int]) -> None:
        self.timesteps = np.asarray(timesteps, dtype=np.int64)
        self.betas = betas
        self.bars = bars = np.cumprod(1.0 - betas)
        prev = np.append(1.0, bars[:-1])
        self.sqrt_bar = np.sqrt(bars)
        self.sqrt_one_minus_bar = np.sqrt(1.0 - bars)
        self.sqrt_recip_bar = np.sqrt(1.0 / bars)
        self.sqrt_recipm1_bar = np.sqrt(1.0 / bars - 1)
        self.posterior_variance = variance = betas * (1.0 - prev) / (1.0 - bars)
        # The posterior variance is 0 at the first step: its log is taken from the second.
        self.log_variance = np.log(np.append(variance[1], variance[1:]))
        self.log_beta = np.log(betas)
        self.coef_x0 = betas * np.sqrt(prev) / (1.0 - bars)
        self.coef_xt = (1.0 - prev) * np.sqrt(1.0 - betas) / (1.0 - bars)

    def __len__(self) -> int:
        return len(self.betas)

    @classmethod
    def cosine(cls, steps: int, count: int | None = None) -> Schedule:
        """The cosine schedule of ``steps`` levels respaced to ``count`` (all by default),
        as the reference builds both of its chains: respacing to every step too, which
        recomputes the betas from the cumulative alphas (a change in their last bits)."""
        return cls(cosine_betas(steps), list(range(steps))).respace(count or steps)

    def respace(self, count: int) -> Schedule:
        kept = respaced(len(self), count)
        bars = np.cumprod(1.0 - self.betas)[kept]
        betas = 1.0 - bars / np.append(1.0, bars[:-1])
        return Schedule(betas, [int(self.timesteps[k]) for k in kept])

    def at(self, name: str, t: torch.Tensor) -> torch.Tensor:
        """The table ``name`` at steps ``t`` (N,), as an (N, 1) float32 column."""
        table = torch.from_numpy(getattr(self, name)).to(t.device)
        return table[t].float()[:, None]

    def step(self, out: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor,
             clip: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """The model's reverse step from its output ``out``: mean and log-variance."""
        eps, v = out.chunk(2, dim=-1)
        x0 = self.at("sqrt_recip_bar", t) * x_t - self.at("sqrt_recipm1_bar", t) * eps
        if clip is not None:
            x0 = x0.clamp(-clip, clip)
        mean = self.at("coef_x0", t) * x0 + self.at("coef_xt", t) * x_t
        frac = (v + 1) / 2
        log_variance = frac * self.at("log_beta", t) + (1 - frac) * self.at("log_variance", t)
        return mean, log_variance


def normal_kl(mean1, logvar1, mean2, logvar2) -> torch.Tensor:
    return 0.5 * (-1.0 + logvar2 - logvar1 + torch.exp(logvar1 - logvar2)
                  + (mean1 - mean2) ** 2 * torch.exp(-logvar2))  # fmt: skip


def _approx_normal_cdf(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def discretised_log_likelihood(x: torch.Tensor, mean: torch.Tensor,
                               log_scale: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """log P(x) of a Gaussian over bins of width 2/255 in [-1, 1] (the open-ended bins at
    either end), elementwise."""
    centred = x - mean
    inv_std = torch.exp(-log_scale)
    cdf_plus = _approx_normal_cdf(inv_std * (centred + 1.0 / 255.0))
    cdf_min = _approx_normal_cdf(inv_std * (centred - 1.0 / 255.0))
    log_cdf_plus = torch.log(cdf_plus.clamp(min=1e-12))
    log_one_minus_cdf_min = torch.log((1.0 - cdf_min).clamp(min=1e-12))
    log_delta = torch.log((cdf_plus - cdf_min).clamp(min=1e-12))
    return torch.where(x < -0.999, log_cdf_plus,
                       torch.where(x > 0.999, log_one_minus_cdf_min, log_delta))  # fmt: skip


def training_loss(net: Denoiser, train: Schedule, x0: torch.Tensor, cond: torch.Tensor,
                  t: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """Per row: noise MSE + the variational bound in bits (through the variance only)."""
    mse, bound = loss_terms(net, train, x0, cond, t, noise)
    return mse + bound


def loss_terms(net: Denoiser, train: Schedule, x0: torch.Tensor, cond: torch.Tensor,
               t: torch.Tensor, noise: torch.Tensor,
               ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """Per row: the noise MSE and the variational bound in bits, apart (the reference's
    ``mse`` and ``vb``)."""
    x_t = train.at("sqrt_bar", t) * x0 + train.at("sqrt_one_minus_bar", t) * noise
    out = net(x_t, torch.from_numpy(train.timesteps).to(t.device)[t], cond)
    eps, v = out.chunk(2, dim=-1)
    mean, log_variance = train.step(torch.cat([eps.detach(), v], dim=-1), x_t, t)
    true_mean = train.at("coef_x0", t) * x0 + train.at("coef_xt", t) * x_t
    kl = normal_kl(true_mean, train.at("log_variance", t), mean, log_variance)
    nll = -discretised_log_likelihood(x0, mean, 0.5 * log_variance)
    bound = torch.where(t == 0, nll.mean(-1), kl.mean(-1)) / math.log(2.0)
    return (noise - eps).pow(2).mean(-1), bound


@torch.no_grad()
def sample(net: Denoiser, steps: Schedule, cond: torch.Tensor, x: torch.Tensor,
           noise: Callable[[], torch.Tensor], temperature: float = 1.0,
           clip: float | None = None) -> torch.Tensor:  # fmt: skip
    """Ancestral sampling from ``x`` (pure noise) over every step of ``steps``; ``noise()``
    draws each step's noise (the last step's too, which it does not add)."""
    n = len(x)
    for i in range(len(steps) - 1, -1, -1):
        t = torch.full((n,), i, dtype=torch.long, device=x.device)
        out = net(x, torch.full((n,), int(steps.timesteps[i]), device=x.device), cond)
        mean, log_variance = steps.step(out, x, t, clip)
        z = noise()
        x = mean + (torch.exp(0.5 * log_variance) * z * temperature if i else 0.0)
    return x
