"""The reference's training-image augmentation (``augment``), one draw per window applied
alike to every frame of the window (the reference seeds each frame's transform with the
sample's seed), before the frames are resized for the autoencoder:

- ``colour_jitter`` (its LIBERO-10 dataset): brightness, contrast and saturation factors
  uniform in [0.8, 1.2] and a hue shift uniform in [-0.05, 0.05] of a turn, applied in a random
  order; brightness scales the pixels, contrast blends with the frame's mean grey level,
  saturation with the frame's grey image, hue rotates the HSV hue; clipped to [0, 1] after
  each (torchvision's ``ColorJitter(0.2, 0.2, 0.2, 0.05)``).
- ``crop_blur`` (its Push-T dataset): with probability 0.5 a crop of 95% of each side at a
  random position, resized back (bilinear); then with probability 0.5 a 5 x 5 Gaussian blur
  of sigma uniform in [0.1, 2] (reflected borders).

Images are float (N, F, 3, H, W) in [0, 1]: N windows of F frames. Every random number comes
from the given generator, so a stage's augmentation depends on its seed only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

KINDS = ("colour_jitter", "crop_blur")
_GREY = (0.2989, 0.587, 0.114)


def _uniform(n: int, low: float, high: float, g: torch.Generator) -> torch.Tensor:
    return low + (high - low) * torch.rand(n, generator=g)


def draw(kind: str, n: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """The parameters of ``n`` windows' transforms."""
    if kind == "colour_jitter":
        order = torch.stack([torch.randperm(4, generator=generator) for _ in range(n)])
        return {"order": order, "brightness": _uniform(n, 0.8, 1.2, generator),
                "contrast": _uniform(n, 0.8, 1.2, generator),
                "saturation": _uniform(n, 0.8, 1.2, generator),
                "hue": _uniform(n, -0.05, 0.05, generator)}  # fmt: skip
    if kind == "crop_blur":
        return {"crop": torch.rand(n, generator=generator) < 0.5,
                "top": torch.rand(n, generator=generator),
                "left": torch.rand(n, generator=generator),
                "blur": torch.rand(n, generator=generator) < 0.5,
                "sigma": _uniform(n, 0.1, 2.0, generator)}  # fmt: skip
    raise ValueError(f"unknown augmentation {kind!r}: one of {', '.join(KINDS)}")


def apply(kind: str, images: torch.Tensor, params: dict[str, torch.Tensor]) -> torch.Tensor:
    """``images`` (N, F, 3, H, W) transformed by each window's drawn parameters."""
    params = {k: v.to(images.device) for k, v in params.items()}
    if kind == "colour_jitter":
        return _jitter(images, params)
    if kind == "crop_blur":
        return _blur(_crop(images, params), params)
    raise ValueError(f"unknown augmentation {kind!r}: one of {', '.join(KINDS)}")


def grey(images: torch.Tensor) -> torch.Tensor:
    r, g, b = images.unbind(dim=-3)
    return (_GREY[0] * r + _GREY[1] * g + _GREY[2] * b).unsqueeze(-3)


def _blend(a: torch.Tensor, b: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    f = factor.view(-1, *([1] * (a.dim() - 1)))
    return (f * a + (1 - f) * b).clamp(0, 1)


def rgb_to_hsv(images: torch.Tensor) -> torch.Tensor:
    r, g, b = images.unbind(dim=-3)
    high, low = images.max(dim=-3).values, images.min(dim=-3).values
    grey_pixel = high == low
    spread = high - low
    ones = torch.ones_like(high)
    s = spread / torch.where(grey_pixel, ones, high)
    divisor = torch.where(grey_pixel, ones, spread)
    rc, gc, bc = (high - r) / divisor, (high - g) / divisor, (high - b) / divisor
    h = torch.where(high == r, bc - gc,
                    torch.where(high == g, 2.0 + rc - bc, 4.0 + gc - rc))  # fmt: skip
    h = torch.fmod(h / 6.0 + 1.0, 1.0)
    return torch.stack([h, s, high], dim=-3)


def hsv_to_rgb(images: torch.Tensor) -> torch.Tensor:
    h, s, v = images.unbind(dim=-3)
    sector = torch.floor(h * 6.0)
    f = h * 6.0 - sector
    sector = sector.to(torch.int64) % 6
    p = (v * (1.0 - s)).clamp(0, 1)
    q = (v * (1.0 - s * f)).clamp(0, 1)
    t = (v * (1.0 - s * (1.0 - f))).clamp(0, 1)
    # (r, g, b) of each of the six sectors of the hue circle
    table = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = torch.zeros_like(images)
    for i, channels in enumerate(table):
        where = (sector == i).unsqueeze(-3)
        out = torch.where(where, torch.stack(channels, dim=-3), out)
    return out


def _jitter(images: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
    out = images
    for position in range(4):
        for op in range(4):
            rows = p["order"][:, position] == op
            if not bool(rows.any()):
                continue
            x = out[rows]
            if op == 0:
                x = _blend(x, torch.zeros_like(x), p["brightness"][rows])
            elif op == 1:
                mean = grey(x).mean(dim=(-3, -2, -1), keepdim=True)  # per frame
                x = _blend(x, mean, p["contrast"][rows])
            elif op == 2:
                x = _blend(x, grey(x), p["saturation"][rows])
            else:
                hsv = rgb_to_hsv(x)
                shift = p["hue"][rows].view(-1, 1, 1, 1)
                hue = torch.remainder(hsv[..., 0, :, :] + shift, 1.0)
                x = hsv_to_rgb(torch.stack([hue, hsv[..., 1, :, :], hsv[..., 2, :, :]], dim=-3))
            out = out.clone() if out is images else out
            out[rows] = x
    return out


def _crop(images: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
    n, frames, c, height, width = images.shape
    ch, cw = int(height * 0.95), int(width * 0.95)
    out = images.clone()
    for i in torch.nonzero(p["crop"]).flatten().tolist():
        top = int(p["top"][i] * (height - ch + 1))
        left = int(p["left"][i] * (width - cw + 1))
        crop = images[i, :, :, top : top + ch, left : left + cw]
        out[i] = F.interpolate(crop, size=(height, width), mode="bilinear", align_corners=False)
    return out


def _blur(images: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
    n, frames, c, height, width = images.shape
    out = images.clone()
    x = torch.linspace(-2, 2, 5, device=images.device)
    for i in torch.nonzero(p["blur"]).flatten().tolist():
        kernel = torch.exp(-0.5 * (x / p["sigma"][i]) ** 2)
        kernel = kernel / kernel.sum()
        frame = images[i].reshape(frames * c, 1, height, width)
        frame = F.pad(frame, (2, 2, 2, 2), mode="reflect")
        frame = F.conv2d(frame, kernel.view(1, 1, 1, 5))
        frame = F.conv2d(frame, kernel.view(1, 1, 5, 1))
        out[i] = frame.view(frames, c, height, width)
    return out
