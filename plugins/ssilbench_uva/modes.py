"""UVA's task modes: which inputs a mode hides behind learned placeholder tokens, and which
losses it trains.

| mode     | history | future frames          | actions in | loss           |
|----------|---------|------------------------|------------|----------------|
| policy   | visible | hidden                 | hidden     | action         |
| video    | visible | randomly masked        | hidden     | video          |
| forward  | visible | randomly masked (*)    | visible    | video          |
| inverse  | visible | visible                | hidden     | action         |
| full     | visible | randomly masked (*)    | hidden     | video + action |

History frames are visible in every mode (in inverse dynamics too: the paper's change to
UVA, whose IDM otherwise sees only the future). The video loss covers exactly the masked
future tokens.

Random masks (``masking``): ``reference`` (the UVA/MAR code) draws one ratio per batch
from a normal of mean 1 and standard deviation 0.25 truncated to [min_mask_ratio, 1], and
masks ceil(ratio x patches) patch positions per window, chosen at random per window and the
same in every future frame; (*) forward and full modes use it too. ``uniform`` (ssilbench
before 0.3) draws a ratio per window from [min_mask_ratio, 1] and masks that share of the
window's future tokens independently of frames; forward and full modes hide every future
token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

MODES = ("policy", "video", "forward", "inverse", "full")

ROLE_MODES = {"policy": ("policy",), "idm": ("inverse",), "video": ("video",)}
"""The modes that train a model in each role of ``ssilbench.kit.RoleModel`` (a mode's own
name is accepted as a role too)."""


def modes_of(roles: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    out: list[str] = []
    for role in roles:
        for mode in ROLE_MODES.get(role, (role,)):
            if mode not in MODES:
                raise ValueError(f"unknown UVA role or mode {role!r}; known: "
                                 f"{', '.join([*ROLE_MODES, *MODES])}")  # fmt: skip
            if mode not in out:
                out.append(mode)
    return tuple(out)


@dataclass(frozen=True)
class Masks:
    """For a batch: ``future_visible`` (B, T) per future token, ``actions_visible`` (B,),
    and the losses: ``video_target`` (B, T) marks future tokens in the video loss."""

    future_visible: torch.Tensor
    actions_visible: torch.Tensor
    video_target: torch.Tensor
    action_loss: bool

    @property
    def video_loss(self) -> bool:
        return bool(self.video_target.any())


def mode_masks(
    mode: str,
    batch: int,
    future_tokens: int,
    generator: torch.Generator | None = None,
    min_mask_ratio: float = 0.7,
    device: torch.device | str = "cpu",
    *,
    masking: str = "uniform",
    frames: int = 1,
) -> Masks:
    """The masks of one mode for a batch (the random modes draw their masked tokens).
    ``frames`` is the number of future frames the ``future_tokens`` are split into
    (``masking="reference"`` masks the same positions in each)."""
    ones = torch.ones(batch, future_tokens, dtype=torch.bool)
    none = torch.zeros(batch, future_tokens, dtype=torch.bool)
    if masking not in ("reference", "uniform"):
        raise ValueError(f"unknown masking {masking!r}; known: reference, uniform")
    if mode == "policy":
        future, actions, loss_action = none, False, True
    elif masking == "reference" and mode in ("video", "forward", "full"):
        visible = ~reference_mask(batch, future_tokens, frames, min_mask_ratio, generator)
        future, actions, loss_action = visible, mode == "forward", mode == "full"
    elif mode == "video":
        # Each sample masks a ratio drawn from [min_mask_ratio, 1] of its future tokens
        # (at least one), chosen at random.
        ratio = min_mask_ratio + (1 - min_mask_ratio) * torch.rand(batch, generator=generator)
        count = (ratio * future_tokens).ceil().clamp(1, future_tokens).long()
        order = torch.rand(batch, future_tokens, generator=generator).argsort(dim=1)
        rank = order.argsort(dim=1)
        future, actions, loss_action = rank >= count[:, None], False, False
    elif mode == "forward":
        future, actions, loss_action = none, True, False
    elif mode == "inverse":
        future, actions, loss_action = ones, False, True
    elif mode == "full":
        future, actions, loss_action = none, False, True
    else:
        raise ValueError(f"unknown UVA mode {mode!r}; known: {', '.join(MODES)}")
    video_target = ~future if mode in ("video", "forward", "full") else none
    return Masks(
        future_visible=future.to(device),
        actions_visible=torch.full((batch,), actions, dtype=torch.bool, device=device),
        video_target=video_target.to(device),
        action_loss=loss_action,
    )


def truncated_ratio(min_mask_ratio: float, generator: torch.Generator | None = None) -> float:
    """One mask ratio: N(1, 0.25) truncated to [min_mask_ratio, 1] (MAR's and UVA's
    ``truncnorm((min - 1) / 0.25, 0, loc=1, scale=0.25)``), by inverting the normal CDF."""
    low = torch.special.ndtr(torch.tensor((min_mask_ratio - 1.0) / 0.25, dtype=torch.float64))
    u = torch.rand((), generator=generator, dtype=torch.float64)
    p = low + (0.5 - low) * u  # the CDF of 0 (the upper bound 1) is 1/2
    return float((1.0 + 0.25 * torch.special.ndtri(p)).clamp(min_mask_ratio, 1.0))


def reference_mask(batch: int, future_tokens: int, frames: int, min_mask_ratio: float,
                   generator: torch.Generator | None = None) -> torch.Tensor:  # fmt: skip
    """(batch, future_tokens) True where masked: one ratio for the batch, ceil(ratio x
    patches) positions per window (its own random order), the same in each of ``frames``."""
    if future_tokens % frames:
        raise ValueError(f"{future_tokens} future tokens do not split into {frames} frames")
    patches = future_tokens // frames
    count = math.ceil(patches * truncated_ratio(min_mask_ratio, generator))
    order = torch.rand(batch, patches, generator=generator).argsort(dim=1)
    masked = torch.zeros(batch, patches, dtype=torch.bool)
    masked.scatter_(1, order[:, :count], True)
    return masked.repeat(1, frames)
