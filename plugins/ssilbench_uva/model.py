"""The UVA network: one bidirectional transformer over the latent tokens of history and
future frames and the tokens of an action chunk, with a video and an action head.

A mode (``modes.py``) replaces hidden future tokens by a learned placeholder
(``future_mask_token``) and hidden actions by another (``action_mask_token``); the heads
read the transformer's output at the future tokens (video) and at the action tokens
(actions). Blocks are named like the masked-autoregressive image models' (``z_proj``,
``encoder_blocks.<i>.attn.qkv``, ``decoder_blocks``, ``diffloss``), so a MAR-B checkpoint
initialises the parts whose names and shapes agree.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ssilbench_uva.diffusion import DiffusionHead, LinearActionHead
from ssilbench_uva.modes import Masks

LATENT_CLIP = 5.0
"""Bound on sampled latent tokens, in standard deviations of the data's latents."""


@dataclass(frozen=True)
class Layout:
    """Token counts of one window: frames, cameras, tokens per image, actions."""

    history: int
    future: int
    cameras: int
    patches: int
    latent: int
    chunk: int
    action_dim: int
    proprio_dim: int

    @property
    def history_tokens(self) -> int:
        return self.history * self.cameras * self.patches

    @property
    def future_tokens(self) -> int:
        return self.future * self.cameras * self.patches

    @property
    def proprio_tokens(self) -> int:
        return self.history if self.proprio_dim else 0

    @property
    def total(self) -> int:
        return self.history_tokens + self.future_tokens + self.proprio_tokens + self.chunk


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class Mlp(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.attn = Attention(width, heads)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.mlp = Mlp(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class UVANet(nn.Module):
    def __init__(self, layout: Layout, width: int, depth: int, heads: int, head_width: int,
                 head_depth: int, action_head: str, train_steps: int,
                 sample_steps: int) -> None:  # fmt: skip
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        self.layout = layout
        self.z_proj = nn.Linear(layout.latent, width)
        self.action_proj = nn.Linear(layout.action_dim, width)
        self.proprio_proj = nn.Linear(layout.proprio_dim, width) if layout.proprio_dim else None
        self.pos_embed = nn.Parameter(torch.randn(1, layout.total, width) * 0.02)
        self.future_mask_token = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.action_mask_token = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        half = depth // 2
        self.encoder_blocks = nn.ModuleList(Block(width, heads) for _ in range(half))
        self.decoder_blocks = nn.ModuleList(Block(width, heads) for _ in range(depth - half))
        self.norm = nn.LayerNorm(width, eps=1e-6)
        # Latent tokens are normalised to unit variance per channel; actions to [-1, 1].
        self.diffloss = DiffusionHead(layout.latent, width, head_width, head_depth,
                                      train_steps, sample_steps, clip=LATENT_CLIP)  # fmt: skip
        if action_head == "diffusion":
            self.action_head = DiffusionHead(layout.action_dim, width, head_width, head_depth,
                                             train_steps, sample_steps, clip=1.0)  # fmt: skip
        else:
            self.action_head = LinearActionHead(layout.action_dim, width)

    def forward(
        self,
        history: torch.Tensor,
        future: torch.Tensor | None,
        proprio: torch.Tensor | None,
        actions: torch.Tensor | None,
        masks: Masks,
        known: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Transformer outputs at the future tokens (B, Tf, D) and action tokens (B, K, D).

        ``history`` (B, Th, latent) and ``future`` (B, Tf, latent) are latent tokens
        (``future`` may be None when every future token is hidden); ``actions`` (B, K, A)
        may be None when hidden; ``known`` (B, K) marks the actions that are real labels:
        the others stay hidden even in a mode that shows actions."""
        lay = self.layout
        b = history.shape[0]
        width = self.pos_embed.shape[-1]
        hist = self.z_proj(history)
        mask_future = self.future_mask_token.expand(b, lay.future_tokens, width)
        if future is None:
            fut = mask_future
        else:
            fut = torch.where(masks.future_visible[..., None], self.z_proj(future), mask_future)
        hidden_actions = self.action_mask_token.expand(b, lay.chunk, width)
        if actions is None:
            act = hidden_actions
        else:
            visible = masks.actions_visible[:, None].expand(b, lay.chunk)
            if known is not None:
                visible = visible & known
            act = torch.where(visible[..., None], self.action_proj(actions), hidden_actions)
        parts = [hist, fut]
        if self.proprio_proj is not None:
            parts.append(self.proprio_proj(proprio))
        parts.append(act)
        x = torch.cat(parts, dim=1) + self.pos_embed
        for block in (*self.encoder_blocks, *self.decoder_blocks):
            x = block(x)
        x = self.norm(x)
        start = lay.history_tokens
        return x[:, start : start + lay.future_tokens], x[:, -lay.chunk :]
