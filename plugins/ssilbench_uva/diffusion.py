"""Per-token diffusion heads: a small MLP that denoises one target vector (a latent token of
a future frame, or one action) conditioned on the transformer's output at that token.

Two kinds (the ``diffusion`` option): ``ddpm``, the reference's (``ssilbench_uva.ddpm``: the
noise and a variance predicted, noise MSE + the variational bound, ancestral DDPM at a
temperature), and ``ddim``: the noise of a cosine-schedule DDPM predicted, deterministic DDIM
over fewer, evenly spaced steps. Module names follow the masked-autoregressive family's
diffusion loss (``net.time_embed``, ``net.res_blocks.<i>``...), so its checkpoints load by
name where sizes agree.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ssilbench_uva import ddpm


def cosine_alpha_bars(steps: int, schedule: str = "reference") -> torch.Tensor:
    """cumprod(alpha) of the cosine schedule at t = 0..steps - 1, as float32. ``reference``:
    the reference's, the cumulative product of its betas (clipped at 0.999) in float64;
    ``clamped``: ssilbench's earlier, f(t) / f(0) at t = 1/steps .. 1 clamped to
    [1e-5, 0.9999] (it differs at t = 0 and, for 1,000 steps, t >= 997)."""
    if schedule == "clamped":
        t = torch.linspace(0, 1, steps + 1, dtype=torch.float64)
        f = torch.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
        return (f / f[0])[1:].clamp(1e-5, 0.9999).float()
    return torch.from_numpy(np.cumprod(1.0 - ddpm.cosine_betas(steps))).float()


def timestep_embedding(t: torch.Tensor, dim: int = 256) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device) / half)
    args = t.float()[:, None] * freqs[None]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class _TimeEmbed(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(256, width), nn.SiLU(), nn.Linear(width, width))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return self.mlp(timestep_embedding(t))


class _ResBlock(nn.Module):
    """Residual MLP block modulated (shift, scale, gate) by the condition."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.in_ln = nn.LayerNorm(width, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 3 * width))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale, gate = self.adaLN_modulation(c).chunk(3, dim=-1)
        return x + gate * self.mlp(self.in_ln(x) * (1 + scale) + shift)


class _FinalLayer(nn.Module):
    def __init__(self, width: int, out: int) -> None:
        super().__init__()
        self.norm_final = nn.LayerNorm(width, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(width, out)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(width, 2 * width))

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=-1)
        return self.linear(self.norm_final(x) * (1 + scale) + shift)


class DenoiserMLP(nn.Module):
    def __init__(self, target: int, cond: int, width: int, depth: int,
                 reference_init: bool = False, out: int | None = None) -> None:  # fmt: skip
        super().__init__()
        self.time_embed = _TimeEmbed(width)
        self.cond_embed = nn.Linear(cond, width)
        self.input_proj = nn.Linear(target, width)
        self.res_blocks = nn.ModuleList(_ResBlock(width) for _ in range(depth))
        self.final_layer = _FinalLayer(width, out or target)
        # Zero-initialised modulation: each block starts as the identity (stable start).
        for block in self.res_blocks:
            nn.init.zeros_(block.adaLN_modulation[-1].weight)
            nn.init.zeros_(block.adaLN_modulation[-1].bias)
        nn.init.zeros_(self.final_layer.adaLN_modulation[-1].weight)
        nn.init.zeros_(self.final_layer.adaLN_modulation[-1].bias)
        if reference_init:
            self._reference_init()

    def _reference_init(self) -> None:
        # MAR's diffusion MLP: Xavier-uniform linear maps with zero bias, the time embedding
        # N(0, 0.02), every modulation and the output layer zero (the head starts at 0).
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.normal_(self.time_embed.mlp[0].weight, std=0.02)
        nn.init.normal_(self.time_embed.mlp[2].weight, std=0.02)
        for layer in (*(b.adaLN_modulation[-1] for b in self.res_blocks),
                      self.final_layer.adaLN_modulation[-1], self.final_layer.linear):  # fmt: skip
            nn.init.zeros_(layer.weight)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        c = self.time_embed(t) + self.cond_embed(cond)
        h = self.input_proj(x)
        for block in self.res_blocks:
            h = block(h, c)
        return self.final_layer(h, c)


class DiffusionHead(nn.Module):
    """A diffusion loss and sampler of ``target``-sized vectors given ``cond``: ``kind``
    ``ddpm`` (the reference's, see ``ssilbench_uva.ddpm``) or ``ddim`` (noise MSE, DDIM)."""

    def __init__(self, target: int, cond: int, width: int, depth: int,
                 train_steps: int = 100, sample_steps: int = 10,
                 clip: float | None = None, reference_init: bool = False,
                 kind: str = "ddim", temperature: float = 1.0,
                 noise_schedule: str = "reference") -> None:  # fmt: skip
        super().__init__()
        if kind not in ("ddpm", "ddim"):
            raise ValueError(f"unknown diffusion {kind!r}: ddpm or ddim")
        if noise_schedule not in ("reference", "clamped") or (
            kind == "ddpm" and noise_schedule != "reference"
        ):
            raise ValueError(f"noise schedule {noise_schedule!r} with diffusion {kind!r}: "
                             "reference, or clamped with ddim")  # fmt: skip
        self.kind = kind
        # ddpm also predicts the variance: twice the outputs (MAR-B's head has them all).
        out = 2 * target if kind == "ddpm" else target
        self.net = DenoiserMLP(target, cond, width, depth, reference_init, out=out)
        self.target = target
        # The x0 estimate at the noisiest levels divides by sqrt(alpha_bar) ~ 0: clipping it
        # to the targets' range (actions scaled to [-1, 1]) keeps sampling stable.
        self.clip = clip
        self.temperature = temperature
        self.sample_steps = min(sample_steps, train_steps)
        self.register_buffer("alpha_bars", cosine_alpha_bars(train_steps, noise_schedule),
                             persistent=False)  # fmt: skip
        if kind == "ddpm":
            self.train_schedule = ddpm.Schedule.cosine(train_steps)
            self.sample_schedule = ddpm.Schedule.cosine(train_steps, self.sample_steps)

    def loss(self, x0: torch.Tensor, cond: torch.Tensor, weight: torch.Tensor | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:  # fmt: skip
        """The mean loss over rows (weighted, e.g. by known labels): the noise-prediction
        error (``ddim``), plus the variational bound (``ddpm``)."""
        n = len(x0)
        t = torch.randint(0, len(self.alpha_bars), (n,), generator=generator).to(x0.device)
        noise = torch.randn(x0.shape, generator=generator).to(x0.device)
        if self.kind == "ddpm":
            err = ddpm.training_loss(self.net, self.train_schedule, x0, cond, t, noise)
        else:
            bar = self.alpha_bars[t][:, None]
            xt = bar.sqrt() * x0 + (1 - bar).sqrt() * noise
            err = (self.net(xt, t, cond) - noise).pow(2).mean(dim=-1)
        if weight is None:
            return err.mean()
        return (err * weight).sum() / weight.sum().clamp_min(1.0)

    @torch.no_grad()
    def sample(self, cond: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """From pure noise over ``sample_steps`` steps: DDPM at the head's temperature, or
        DDIM (eta = 0)."""
        n = len(cond)
        x = torch.randn((n, self.target), generator=generator).to(cond.device)
        if self.kind == "ddpm":

            def noise() -> torch.Tensor:
                return torch.randn((n, self.target), generator=generator).to(cond.device)

            return ddpm.sample(self.net, self.sample_schedule, cond, x, noise,
                               self.temperature, self.clip)  # fmt: skip
        total = len(self.alpha_bars)
        times = torch.linspace(total - 1, 0, self.sample_steps).round().long().tolist()
        for i, t in enumerate(times):
            bar = self.alpha_bars[t]
            eps = self.net(x, torch.full((n,), t, device=cond.device), cond)
            x0 = (x - (1 - bar).sqrt() * eps) / bar.sqrt()
            if self.clip is not None:
                x0 = x0.clamp(-self.clip, self.clip)
                eps = (x - bar.sqrt() * x0) / (1 - bar).sqrt()
            prev = self.alpha_bars[times[i + 1]] if i + 1 < len(times) else torch.tensor(1.0)
            x = prev.sqrt() * x0 + (1 - prev).sqrt() * eps
        return x


class LinearActionHead(nn.Module):
    """The deterministic variant: a linear map per action token, SmoothL1 (beta = 1)."""

    def __init__(self, target: int, cond: int) -> None:
        super().__init__()
        self.proj = nn.Linear(cond, target)

    def loss(self, x0: torch.Tensor, cond: torch.Tensor, weight: torch.Tensor | None = None,
             generator: torch.Generator | None = None) -> torch.Tensor:  # fmt: skip
        err = F.smooth_l1_loss(self.proj(cond), x0, beta=1.0, reduction="none").mean(dim=-1)
        if weight is None:
            return err.mean()
        return (err * weight).sum() / weight.sum().clamp_min(1.0)

    @torch.no_grad()
    def sample(self, cond: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        return self.proj(cond)
