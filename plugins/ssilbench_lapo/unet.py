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


class _Residual(nn.Module):
    """x + conv(relu(conv(relu(x)))) with a narrower hidden layer."""

    def __init__(self, channels: int, hidden: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, hidden, 3, padding=1)
        self.conv1 = nn.Conv2d(hidden, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


def _batch_norm(channels: int) -> nn.BatchNorm2d:
    norm = nn.BatchNorm2d(channels)
    # The batch counter (unused: the momentum is fixed at 0.1) as one element rather than a
    # 0-d tensor, which the stage cache cannot digest.
    norm.num_batches_tracked = torch.zeros(1, dtype=torch.long)
    return norm


class _Down(nn.Module):
    """conv3x3 -> BatchNorm -> residual -> maxpool 2 -> ReLU: halves the image."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm = _batch_norm(out_channels)
        self.res = _Residual(out_channels, out_channels // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(F.max_pool2d(self.res(self.norm(self.conv(x))), 2))


class _Up(nn.Module):
    """transposed conv 2x2 stride 2 -> BatchNorm -> residual -> ReLU: doubles the image."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose2d(in_channels, out_channels, 2, 2)
        self.norm = _batch_norm(out_channels)
        self.res = _Residual(out_channels, out_channels // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.res(self.norm(self.conv(x))))


class ReferenceUNet(nn.Module):
    """LAPO's reference forward model: (s (B, C, H, W), z (B, latent_dim)) -> s' in [0, 1].

    The layout of the reference code, with ``base`` channels at the first level (24 in the
    paper's configuration): the raw latent tiled over the image and concatenated to s; down
    blocks (conv, BatchNorm, residual, max-pool) of base x 1, 2, 4, ... channels to a 2x2
    image; a 2x2 convolution to 1x1; the raw latent in place of that last skip connection; up
    blocks (transposed conv, BatchNorm, residual) concatenating each level's skip; s again
    before a final conv-residual-conv; tanh / 2. The reference reads pixels centred at 0
    (x / 255 - 0.5): s is shifted by -0.5 on the way in and the output by +0.5 on the way out.

    The reference needs a square power-of-two image (64 x 64 on Procgen); other images are
    zero-padded (at the centred value 0) to the next such square and the output cropped.
    """

    def __init__(self, channels: int, latent_dim: int, image_size: tuple[int, int],
                 base: int = 24) -> None:  # fmt: skip
        super().__init__()
        side = max(4, 1 << (max(image_size) - 1).bit_length())
        self.image_size, self.side = tuple(image_size), side
        levels = side.bit_length() - 2  # down blocks to 2x2: 64 -> 5
        down = [channels + latent_dim] + [base << i for i in range(levels + 1)]
        self.down = nn.ModuleList(_Down(a, b) for a, b in zip(down[:-2], down[1:-1], strict=True))
        self.to_one = nn.Conv2d(down[-2], down[-1], 2)
        up = [base << i for i in range(levels, -1, -1)] + [base]
        skips = [latent_dim] + down[-2:0:-1]
        self.up = nn.ModuleList(
            _Up(a + s, b) for a, b, s in zip(up[:-1], up[1:], skips, strict=True)
        )
        self.final_conv = nn.Conv2d(base + channels, base, 3, padding=1)
        self.final_res = _Residual(base, base // 2)
        self.out = nn.Conv2d(base, channels, 1)

    def forward(self, obs: torch.Tensor, latent: torch.Tensor) -> torch.Tensor:
        h, w = obs.shape[-2:]
        state = obs - 0.5
        if (h, w) != (self.side, self.side):
            state = F.pad(state, (0, self.side - w, 0, self.side - h))
        action = latent.to(obs.dtype)[:, :, None, None]
        x = torch.cat([state, action.expand(-1, -1, self.side, self.side)], dim=1)
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
        x = self.to_one(x)
        skips.append(action)  # the latent, not the 1x1 features, joins the first up block
        for block, skip in zip(self.up, reversed(skips), strict=True):
            x = block(torch.cat([x, skip], dim=1))
        x = self.final_conv(torch.cat([x, state], dim=1))
        out = self.out(torch.relu(self.final_res(x)))
        return 0.5 + 0.5 * torch.tanh(out[..., :h, :w])
