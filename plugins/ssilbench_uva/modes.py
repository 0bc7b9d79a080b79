"""UVA's task modes: which inputs a mode hides behind learned placeholder tokens, and which
losses it trains.

| mode     | history | future frames          | actions in | loss           |
|----------|---------|------------------------|------------|----------------|
| policy   | visible | hidden                 | hidden     | action         |
| video    | visible | randomly masked (>=0.7)| hidden     | video          |
| forward  | visible | masked                 | visible    | video          |
| inverse  | visible | visible                | hidden     | action         |
| full     | visible | masked                 | hidden     | video + action |

History frames are visible in every mode (in inverse dynamics too: the paper's change to
UVA, whose IDM otherwise sees only the future). The video loss covers exactly the masked
future tokens.
"""

from __future__ import annotations

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
) -> Masks:
    """The masks of one mode for a batch (the video mode draws its masked tokens)."""
    ones = torch.ones(batch, future_tokens, dtype=torch.bool)
    none = torch.zeros(batch, future_tokens, dtype=torch.bool)
    if mode == "policy":
        future, actions, loss_action = none, False, True
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
