"""A KL-regularised image autoencoder (the "KL-16" family of latent diffusion models) whose
latents are UVA's video tokens, and loading of pretrained weights from local files.

The module layout and parameter names follow that family's public checkpoints (``encoder``,
``decoder``, ``quant_conv``, ``post_quant_conv``; ``down.<i>.block.<j>.conv1`` ...), so a
local KL-16 checkpoint loads by name and shape when the sizes agree. Small sizes train on
D_U in seconds on a CPU; nothing is ever downloaded.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ssilbench.api import ConfigError
from ssilbench_uva.checkpoints import read_state


def _norm(channels: int) -> nn.GroupNorm:
    groups = math.gcd(32, channels)
    return nn.GroupNorm(groups, channels, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.norm1 = _norm(cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm2 = _norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(cin, cout, 1) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return h + (x if self.nin_shortcut is None else self.nin_shortcut(x))


class AttnBlock(nn.Module):
    """Single-head self-attention over the pixels of the lowest resolution."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm = _norm(channels)
        self.q = nn.Conv2d(channels, channels, 1)
        self.k = nn.Conv2d(channels, channels, 1)
        self.v = nn.Conv2d(channels, channels, 1)
        self.proj_out = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        y = self.norm(x)
        q, k, v = (m(y).flatten(2).transpose(1, 2) for m in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v)
        return x + self.proj_out(out.transpose(1, 2).reshape(b, c, h, w))


class Downsample(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.pad(x, (0, 1, 0, 1)))  # asymmetric: halves even sizes exactly


class Upsample(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _Mid(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.block_1 = ResnetBlock(channels, channels)
        self.attn_1 = AttnBlock(channels)
        self.block_2 = ResnetBlock(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block_2(self.attn_1(self.block_1(x)))


class _Level(nn.Module):
    def __init__(self, blocks: list[ResnetBlock], resample: nn.Module | None, name: str,
                 attention: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.block = nn.ModuleList(blocks)
        # Self-attention after every block of the level (KL-16 has it at its lowest level).
        width = blocks[-1].conv2.out_channels
        self.attn = (
            nn.ModuleList(AttnBlock(width) for _ in blocks) if attention else nn.ModuleList()
        )
        if resample is not None:
            setattr(self, name, resample)
        self._resample = name if resample is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(self.block):
            x = block(x)
            if self.attn:
                x = self.attn[i](x)
        return getattr(self, self._resample)(x) if self._resample else x


class Encoder(nn.Module):
    def __init__(self, ch: int, ch_mult: tuple[int, ...], blocks: int, z: int,
                 attention: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        widths = [ch * m for m in (1, *ch_mult)]
        self.down = nn.ModuleList()
        for i in range(len(ch_mult)):
            cin, cout = widths[i], widths[i + 1]
            level = [ResnetBlock(cin if j == 0 else cout, cout) for j in range(blocks)]
            last = i == len(ch_mult) - 1
            resample = None if last else Downsample(cout)
            self.down.append(_Level(level, resample, "downsample", attention and last))
        self.mid = _Mid(widths[-1])
        self.norm_out = _norm(widths[-1])
        self.conv_out = nn.Conv2d(widths[-1], 2 * z, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv_in(x)
        for level in self.down:
            h = level(h)
        return self.conv_out(F.silu(self.norm_out(self.mid(h))))


class Decoder(nn.Module):
    def __init__(self, ch: int, ch_mult: tuple[int, ...], blocks: int, z: int,
                 attention: bool = False) -> None:  # fmt: skip
        super().__init__()
        widths = [ch * m for m in ch_mult]
        self.conv_in = nn.Conv2d(z, widths[-1], 3, padding=1)
        self.mid = _Mid(widths[-1])
        up: list[nn.Module] = []
        cin = widths[-1]
        for i in reversed(range(len(ch_mult))):
            cout = widths[i]
            level = [ResnetBlock(cin if j == 0 else cout, cout) for j in range(blocks + 1)]
            lowest = i == len(ch_mult) - 1
            up.insert(0, _Level(level, Upsample(cout) if i > 0 else None, "upsample",
                                attention and lowest))  # fmt: skip
            cin = cout
        self.up = nn.ModuleList(up)  # indexed by resolution level, as the checkpoints are
        self.norm_out = _norm(widths[0])
        self.conv_out = nn.Conv2d(widths[0], 3, 3, padding=1)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        h = self.mid(self.conv_in(z))
        for level in reversed(self.up):
            h = level(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class KLAutoencoder(nn.Module):
    """Images in [0, 1], (B, 3, H, W) -> latents (B, z, H/2^(L-1), W/2^(L-1))."""

    def __init__(self, ch: int = 32, ch_mult: tuple[int, ...] = (1, 1, 2, 2, 4),
                 blocks: int = 1, z: int = 16, attention: bool = False) -> None:  # fmt: skip
        super().__init__()
        self.downsample = 2 ** (len(ch_mult) - 1)
        self.latent_channels = z
        self.encoder = Encoder(ch, tuple(ch_mult), blocks, z, attention)
        self.decoder = Decoder(ch, tuple(ch_mult), blocks, z, attention)
        self.quant_conv = nn.Conv2d(2 * z, 2 * z, 1)
        self.post_quant_conv = nn.Conv2d(z, z, 1)

    def posterior(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and log-variance of q(z | x); the checkpoints expect inputs in [-1, 1]."""
        moments = self.quant_conv(self.encoder(images * 2 - 1))
        mean, logvar = moments.chunk(2, dim=1)
        return mean, logvar.clamp(-30.0, 20.0)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """The posterior mean: a deterministic latent per image."""
        return self.posterior(images)[0]

    def decode(self, z: torch.Tensor) -> torch.Tensor:
        return (self.decoder(self.post_quant_conv(z)) + 1) / 2

    def loss(self, images: torch.Tensor, generator: torch.Generator | None = None,
             kl_weight: float = 1e-6) -> torch.Tensor:  # fmt: skip
        """Reconstruction error of a posterior sample plus a small KL to N(0, I)."""
        mean, logvar = self.posterior(images)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        z = mean + (0.5 * logvar).exp() * noise
        recon = self.decode(z)
        kl = 0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar).sum(dim=(1, 2, 3)).mean()
        return F.mse_loss(recon, images) + kl_weight * kl


def matching_tensors(module: nn.Module, path: Path, what: str) -> tuple[dict, int]:
    """The tensors of a local checkpoint whose name and shape match ``module``'s, and how many
    tensors the checkpoint holds. ``module`` may live on the meta device (shapes only).

    The file is read with ``weights_only`` (no code runs). Common wrappers (``state_dict``,
    ``model``, ``model_ema``) and prefixes (``module.``, ``model.``) are unwrapped. A file
    that is missing or unreadable, or of which no tensor matches, is refused."""
    tensors = read_state(path, what)
    own = module.state_dict()
    matched = {}
    for name, tensor in tensors.items():
        for candidate in (name, name.removeprefix("module."), name.removeprefix("model.")):
            if candidate in own and own[candidate].shape == tensor.shape:
                matched[candidate] = tensor
                break
    if not matched:
        example = ", ".join(list(own)[:3])
        raise ConfigError(
            f"{what} checkpoint {path}: none of its {len(tensors)} tensors matches this model "
            f"by name and shape (0 of {len(own)} parameters; the model expects names like "
            f"{example}). Check the model size options against the checkpoint."
        )
    return matched, len(tensors)


def load_matching(module: nn.Module, path: Path, what: str, log=print) -> int:
    """Load the tensors of a local checkpoint that match ``module`` (see
    :func:`matching_tensors`); returns how many were loaded and logs it."""
    matched, total = matching_tensors(module, path, what)
    module.load_state_dict(matched, strict=False)
    own = len(module.state_dict())
    unused = total - len(matched)
    note = f"; {unused} tensors of the checkpoint match nothing here" if unused else ""
    log(f"{what}: loaded {len(matched)} of {own} tensors from {Path(path).expanduser()}{note}")
    return len(matched)
