"""LAPO's latent forward model: a U-Net from s to s', conditioned on a latent action.

The latent action is projected and tiled over the image at the input and again at the
bottleneck (as LAPO's forward model does), so that the prediction cannot ignore it. The
output is squashed into the pixel range [0, 1] (LAPO's tanh / 2 for pixels centred at 0), or
left linear: saturated tanh units learn slowly on frames whose pixels sit at 0 or 1 exactly.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _block(in_channels: int, out_channels: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(out_channels, out_channels, 3, padding=1),
        nn.ReLU(),
    )


def _tile(vector: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return vector[:, :, None, None].expand(-1, -1, *like.shape[-2:])


class LatentUNet(nn.Module):
    """(s (B, C, H, W), z (B, latent_dim)) -> predicted s' (B, C, H, W) in [0, 1].

    ``widths`` are the channels at each resolution, the last one the bottleneck; each
    further level halves the image (any size: the decoder resizes to its skip connection).
    ``squash``: tanh into [0, 1] (LAPO); else 0.5 + a linear output.
    """

    def __init__(
        self,
        channels: int,
        latent_dim: int,
        widths: tuple[int, ...] = (64, 128, 256),
        condition: int = 16,
        squash: bool = True,
    ) -> None:
        super().__init__()
        self.squash = squash
        if len(widths) < 2:
            raise ValueError(f"a U-Net needs at least two levels, got widths {widths}")
        self.to_input = nn.Linear(latent_dim, condition)
        self.to_bottleneck = nn.Linear(latent_dim, condition)
        self.down = nn.ModuleList()
        c = channels + condition
        for width in widths[:-1]:
            self.down.append(_block(c, width))
            c = width
        self.bottleneck = _block(c + condition, widths[-1])
        self.up = nn.ModuleList()
        c = widths[-1]
        for width in reversed(widths[:-1]):
            self.up.append(_block(c + width, width))
            c = width
        self.out = nn.Conv2d(c, channels, 1)

    def forward(self, obs: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        latent = latent.to(obs.dtype)
        x = torch.cat([obs, _tile(self.to_input(latent), obs)], dim=1)
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = F.max_pool2d(x, 2, ceil_mode=True)
        x = self.bottleneck(torch.cat([x, _tile(self.to_bottleneck(latent), x)], dim=1))
        for block, skip in zip(self.up, reversed(skips), strict=True):
            x = F.interpolate(x, size=skip.shape[-2:], mode="nearest")
            x = block(torch.cat([x, skip], dim=1))
        out = self.out(x)
        return 0.5 + 0.5 * torch.tanh(out) if self.squash else 0.5 + out
