"""The UVA network: one bidirectional transformer over the latent tokens of history and
future frames and an action chunk, with a video and an action head.

Two token layouts (``token_layout``):

- ``fused`` (the reference's): one token per patch of each future frame. Its channels are
  the concatenation of that patch's future latent (or the learned ``fake_latent_x`` where
  masked), the same patch of the paired history frame, the action the token's share of the
  sequence covers (or ``fake_action_latent``) and the frame's proprioception, projected by
  ``proj_cond_x_layer``; temporal + spatial position embeddings. An encoder and a decoder
  (``decoder_embed`` between them, their own position embeddings) follow, and the outputs
  get a third position embedding before the heads.
- ``sequence`` (ssilbench's before 0.3): every history, future, proprioception and action
  token is its own sequence position (one learned position embedding), hidden future tokens
  and actions are replaced by ``future_mask_token`` / ``action_mask_token``.

Both return the outputs at the future tokens, which the video head denoises token by token,
and one feature vector per action of the chunk: the pooled ``reference`` readout (conv + FC
per frame, frames -> actions by a linear map, refined; the reference's ``conv_fc``) or, in
the sequence layout, the outputs at the action tokens (``per_token``).

An optional condition (one vector per window, e.g. a language embedding) is projected and
repeated into ``condition_tokens`` tokens ahead of the sequence, as the reference does with
its CLIP text embedding in place of MAR's class-embedding buffer; in training a share
``condition_drop`` of the windows sees the learned null condition ``fake_latent`` instead.

Module names follow MAR's and UVA's (``z_proj``, ``encoder_blocks.<i>.attn.qkv``,
``decoder_embed``, ``diffloss.net``...) so that a MAR-B checkpoint maps onto them
(``checkpoints.py``).
"""

from __future__ import annotations

import math
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
    """Token counts of one window: frames, cameras, tokens per image, actions. ``grid`` is
    one image's latent grid (rows, columns); None = square."""

    history: int
    future: int
    cameras: int
    patches: int
    latent: int
    chunk: int
    action_dim: int
    proprio_dim: int
    grid: tuple[int, int] | None = None

    @property
    def history_tokens(self) -> int:
        return self.history * self.cameras * self.patches

    @property
    def future_tokens(self) -> int:
        return self.future * self.cameras * self.patches

    @property
    def frame_tokens(self) -> int:
        """Tokens of one frame: every camera's patches."""
        return self.cameras * self.patches

    @property
    def frame_grid(self) -> tuple[int, int]:
        """One frame's tokens as a 2-D grid: the cameras' grids stacked along the rows."""
        side = math.isqrt(self.patches)
        rows, cols = self.grid or (side, self.patches // side)
        if rows * cols != self.patches:
            raise ValueError(f"a grid of {rows}x{cols} does not hold {self.patches} patches")
        return self.cameras * rows, cols

    @property
    def proprio_tokens(self) -> int:
        return self.history if self.proprio_dim else 0

    @property
    def total(self) -> int:
        return self.history_tokens + self.future_tokens + self.proprio_tokens + self.chunk


class Attention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.heads = heads
        self.dropout = dropout
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        p = self.dropout if self.training else 0.0
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=p)
        out = self.proj(out.transpose(1, 2).reshape(b, n, d))
        return F.dropout(out, p, training=True) if p else out


class Mlp(nn.Module):
    def __init__(self, width: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.dropout = dropout
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.dropout if self.training else 0.0
        h = F.gelu(self.fc1(x))
        if p:  # after the activation and after the output, as timm's ViT blocks
            return F.dropout(self.fc2(F.dropout(h, p, training=True)), p, training=True)
        return self.fc2(h)


class Block(nn.Module):
    """A pre-norm ViT block with timm's parameter names (``norm1``, ``attn.qkv`` ...)."""

    def __init__(self, width: int, heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(width, eps=1e-6)
        self.attn = Attention(width, heads, dropout)
        self.norm2 = nn.LayerNorm(width, eps=1e-6)
        self.mlp = Mlp(width, dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class ActionPooling(nn.Module):
    """The reference's ``conv_fc`` readout: each future frame's output grid -> conv 3x3,
    ReLU, average-pooled to 4x4 -> FC, ReLU, FC: one vector per frame; frames -> actions by
    a linear map over the frame axis (4 -> 16); a refining MLP."""

    def __init__(self, width: int, frames: int, chunk: int, grid: tuple[int, int]) -> None:
        super().__init__()
        self.grid = grid
        self.frames = frames
        self.conv = nn.Sequential(nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
                                  nn.AdaptiveAvgPool2d((4, 4)))  # fmt: skip
        self.fc = nn.Sequential(nn.Linear(width * 16, width), nn.ReLU(), nn.Linear(width, width))
        self.interpolate = nn.Linear(frames, chunk)
        self.refine = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """(B, frames * grid tokens, D) -> (B, chunk, D)."""
        b, _, d = z.shape
        rows, cols = self.grid
        z = z.reshape(b * self.frames, rows, cols, d).permute(0, 3, 1, 2)
        z = self.fc(self.conv(z).flatten(1)).view(b, self.frames, d)
        z = self.interpolate(z.transpose(1, 2)).transpose(1, 2)
        return self.refine(z)


def _action_head(kind: str, layout: Layout, width: int, head_width: int, head_depth: int,
                 train_steps: int, sample_steps: int, reference_init: bool,
                 diffusion: str = "ddim", temperature: float = 1.0,
                 noise_schedule: str = "reference") -> nn.Module:  # fmt: skip
    if kind == "linear":
        return LinearActionHead(layout.action_dim, width)
    return DiffusionHead(layout.action_dim, width, head_width, head_depth, train_steps,
                         sample_steps, clip=1.0, reference_init=reference_init,
                         kind=diffusion, temperature=temperature,
                         noise_schedule=noise_schedule)  # fmt: skip


def _video_head(layout: Layout, width: int, head_width: int, head_depth: int,
                train_steps: int, sample_steps: int, reference_init: bool,
                diffusion: str, temperature: float,
                noise_schedule: str = "reference") -> DiffusionHead:  # fmt: skip
    # The reference samples latents unclipped (clip_denoised=False); DDIM clips them.
    return DiffusionHead(layout.latent, width, head_width, head_depth, train_steps,
                         sample_steps, clip=None if diffusion == "ddpm" else LATENT_CLIP,
                         reference_init=reference_init, kind=diffusion,
                         temperature=temperature, noise_schedule=noise_schedule)  # fmt: skip


class _Condition(nn.Module):
    """The optional per-window condition as ``tokens`` tokens (the reference's text buffer)."""

    def __init__(self, dim: int, width: int, tokens: int, drop: float) -> None:
        super().__init__()
        self.drop = drop
        self.tokens = tokens
        self.condition_proj = nn.Linear(dim, width)
        self.fake_latent = nn.Parameter(torch.randn(1, width) * 0.02)  # the null condition
        self.condition_pos_embed = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.decoder_condition_pos_embed = nn.Parameter(torch.randn(1, tokens, width) * 0.02)

    def forward(self, condition: torch.Tensor | None, b: int) -> torch.Tensor:
        if condition is None:  # unconditional: every window sees the null condition
            c = self.fake_latent.expand(b, -1)
        else:
            c = self.condition_proj(condition)
            if self.training and self.drop:
                dropped = torch.rand(b, device=c.device) < self.drop
                c = torch.where(dropped[:, None], self.fake_latent.to(c.dtype), c)
        return c[:, None].expand(b, self.tokens, -1) + self.condition_pos_embed


def _check_condition(net: nn.Module, condition: torch.Tensor | None) -> None:
    if condition is not None and net.condition is None:
        raise ValueError("this UVA network has no condition input (set condition_dim)")


class UVANet(nn.Module):
    """The ``sequence`` layout (ssilbench's own; see the module docstring)."""

    def __init__(self, layout: Layout, width: int, depth: int, heads: int, head_width: int,
                 head_depth: int, action_head: str, train_steps: int, sample_steps: int, *,
                 dropout: float = 0.0, condition_dim: int | None = None,
                 condition_tokens: int = 64, condition_drop: float = 0.1,
                 diffusion: str = "ddim", temperature: float = 1.0,
                 noise_schedule: str = "reference") -> None:  # fmt: skip
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        action_head = "per_token" if action_head == "diffusion" else action_head
        self.layout = layout
        self.z_proj = nn.Linear(layout.latent, width)
        self.action_proj = nn.Linear(layout.action_dim, width)
        self.proprio_proj = nn.Linear(layout.proprio_dim, width) if layout.proprio_dim else None
        self.pos_embed = nn.Parameter(torch.randn(1, layout.total, width) * 0.02)
        self.future_mask_token = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.action_mask_token = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        half = depth // 2
        self.encoder_blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(half))
        self.decoder_blocks = nn.ModuleList(
            Block(width, heads, dropout) for _ in range(depth - half)
        )
        self.norm = nn.LayerNorm(width, eps=1e-6)
        # Latent tokens are normalised to unit variance per channel; actions to [-1, 1].
        self.diffloss = _video_head(layout, width, head_width, head_depth, train_steps,
                                    sample_steps, False, diffusion, temperature,
                                    noise_schedule)  # fmt: skip
        self.action_head = _action_head(action_head, layout, width, head_width, head_depth,
                                        train_steps, sample_steps, False, diffusion,
                                        temperature, noise_schedule)  # fmt: skip
        # Built after the modules above, so that their initialisation is what it was.
        self.action_pool = (
            ActionPooling(width, layout.future, layout.chunk, layout.frame_grid)
            if action_head == "reference" else None
        )  # fmt: skip
        self.condition = (
            _Condition(condition_dim, width, condition_tokens, condition_drop)
            if condition_dim else None
        )  # fmt: skip

    def forward(
        self,
        history: torch.Tensor,
        future: torch.Tensor | None,
        proprio: torch.Tensor | None,
        actions: torch.Tensor | None,
        masks: Masks,
        known: torch.Tensor | None = None,
        condition: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Outputs at the future tokens (B, Tf, D) and one feature per action (B, K, D).

        ``history`` (B, Th, latent) and ``future`` (B, Tf, latent) are latent tokens
        (``future`` may be None when every future token is hidden); ``actions`` (B, K, A)
        may be None when hidden; ``known`` (B, K) marks the actions that are real labels:
        the others stay hidden even in a mode that shows actions. ``condition`` (B, C) is
        the optional conditioning vector (None: the null condition, or no condition)."""
        _check_condition(self, condition)
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
        if self.condition is not None:
            x = torch.cat([self.condition(condition, b), x], dim=1)
        for block in (*self.encoder_blocks, *self.decoder_blocks):
            x = block(x)
        x = self.norm(x)
        start = x.shape[1] - lay.total + lay.history_tokens
        out_future = x[:, start : start + lay.future_tokens]
        if self.action_pool is not None:
            return out_future, self.action_pool(out_future)
        return out_future, x[:, -lay.chunk :]


class FusedUVANet(nn.Module):
    """The ``fused`` layout: the reference's (see the module docstring)."""

    def __init__(self, layout: Layout, width: int, depth: int, heads: int, head_width: int,
                 head_depth: int, action_head: str, train_steps: int, sample_steps: int, *,
                 dropout: float = 0.1, condition_dim: int | None = None,
                 condition_tokens: int = 64, condition_drop: float = 0.1,
                 diffusion: str = "ddim", temperature: float = 1.0,
                 noise_schedule: str = "reference") -> None:  # fmt: skip
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not a multiple of heads {heads}")
        if layout.history != layout.future:
            raise ValueError(
                f"the fused layout pairs each of the {layout.future} future frames with a "
                f"history frame, but there are {layout.history} history frames"
            )
        if action_head not in ("reference", "linear"):
            raise ValueError(f"the fused layout has no action tokens for action_head={action_head}")
        self.layout = layout
        frames, per_frame = layout.future, layout.frame_tokens
        self.z_proj = nn.Linear(layout.latent, width)  # future frames
        self.z_proj_cond = nn.Linear(layout.latent, width)  # history frames
        self.action_proj_cond = nn.Linear(layout.action_dim, width)
        self.proprio_proj = nn.Linear(layout.proprio_dim, width) if layout.proprio_dim else None
        self.fake_latent_x = nn.Parameter(torch.zeros(1, width))
        self.fake_action_latent = nn.Parameter(torch.zeros(1, width))
        slots = 3 + (1 if layout.proprio_dim else 0)
        self.proj_cond_x_layer = nn.Linear(slots * width, width)
        self.temporal_pos_embed = nn.Parameter(torch.zeros(1, frames, width))
        self.spatial_pos_embed = nn.Parameter(torch.zeros(1, per_frame, width))
        self.z_proj_ln = nn.LayerNorm(width, eps=1e-6)
        half = depth // 2
        self.encoder_blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(half))
        self.encoder_norm = nn.LayerNorm(width, eps=1e-6)
        self.decoder_embed = nn.Linear(width, width)
        self.decoder_temporal_pos_embed = nn.Parameter(torch.zeros(1, frames, width))
        self.decoder_spatial_pos_embed = nn.Parameter(torch.zeros(1, per_frame, width))
        self.decoder_blocks = nn.ModuleList(
            Block(width, heads, dropout) for _ in range(depth - half)
        )
        self.decoder_norm = nn.LayerNorm(width, eps=1e-6)
        self.diffusion_temporal_embed = nn.Parameter(torch.zeros(1, frames, width))
        self.diffusion_spatial_embed = nn.Parameter(torch.zeros(1, per_frame, width))
        self.condition = (
            _Condition(condition_dim, width, condition_tokens, condition_drop)
            if condition_dim else None
        )  # fmt: skip
        self._initialise()
        # The heads keep their own initialisation, as in the reference (built after it).
        self.diffloss = _video_head(layout, width, head_width, head_depth, train_steps,
                                    sample_steps, True, diffusion, temperature,
                                    noise_schedule)  # fmt: skip
        self.action_pool = ActionPooling(width, frames, layout.chunk, layout.frame_grid)
        self.action_head = _action_head(action_head, layout, width, head_width, head_depth,
                                        train_steps, sample_steps, True, diffusion,
                                        temperature, noise_schedule)  # fmt: skip
        # Which action each of the frames x patches tokens carries: the chunk spread evenly
        # over the sequence (the reference repeats each of 16 actions over 64 tokens).
        n = frames * per_frame
        self.register_buffer("action_of_token", torch.arange(n) * layout.chunk // n,
                             persistent=False)  # fmt: skip
        self.register_buffer("frame_of_token", torch.arange(n) // per_frame, persistent=False)

    def _initialise(self) -> None:
        # The reference's: learned tokens and embeddings N(0, 0.02), linear maps
        # Xavier-uniform with zero bias, layer norms 1 and 0.
        for p in (self.fake_latent_x, self.fake_action_latent, self.temporal_pos_embed,
                  self.spatial_pos_embed, self.decoder_temporal_pos_embed,
                  self.decoder_spatial_pos_embed, self.diffusion_temporal_embed,
                  self.diffusion_spatial_embed):  # fmt: skip
            nn.init.normal_(p, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _positions(self, temporal: torch.Tensor, spatial: torch.Tensor) -> torch.Tensor:
        return (temporal[:, :, None] + spatial[:, None]).flatten(1, 2)

    def encode(
        self,
        history: torch.Tensor,
        future: torch.Tensor | None,
        proprio: torch.Tensor | None,
        actions: torch.Tensor | None,
        masks: Masks,
        known: torch.Tensor | None = None,
        condition: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The fused tokens after the encoder (B, [condition +] frames x patches, D)."""
        _check_condition(self, condition)
        lay = self.layout
        b, n = history.shape[0], lay.future_tokens
        width = self.fake_latent_x.shape[-1]
        hidden = self.fake_latent_x.expand(b, n, width)
        if future is None:
            x = hidden
        else:
            x = torch.where(masks.future_visible[..., None], self.z_proj(future), hidden)
        # Frame f of the history goes with future frame f, patch by patch.
        cond = self.z_proj_cond(history)
        hidden_actions = self.fake_action_latent.expand(b, lay.chunk, width)
        if actions is None:
            act = hidden_actions
        else:
            visible = masks.actions_visible[:, None].expand(b, lay.chunk)
            if known is not None:
                visible = visible & known
            act = torch.where(visible[..., None], self.action_proj_cond(actions), hidden_actions)
        parts = [x, cond, act[:, self.action_of_token]]
        if self.proprio_proj is not None:
            parts.append(self.proprio_proj(proprio)[:, self.frame_of_token])
        x = self.proj_cond_x_layer(torch.cat(parts, dim=-1))
        x = x + self._positions(self.temporal_pos_embed, self.spatial_pos_embed)
        if self.condition is not None:
            x = torch.cat([self.condition(condition, b), x], dim=1)
        x = self.z_proj_ln(x)
        for block in self.encoder_blocks:
            x = block(x)
        return self.encoder_norm(x)

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder output -> the per-token outputs the heads read (B, frames x patches, D)."""
        x = self.decoder_embed(x)
        pos = self._positions(self.decoder_temporal_pos_embed, self.decoder_spatial_pos_embed)
        if self.condition is not None:
            pos = torch.cat([self.condition.decoder_condition_pos_embed, pos], dim=1)
        x = x + pos
        for block in self.decoder_blocks:
            x = block(x)
        x = self.decoder_norm(x)
        if self.condition is not None:
            x = x[:, self.condition.tokens :]
        return x + self._positions(self.diffusion_temporal_embed, self.diffusion_spatial_embed)

    def forward(
        self,
        history: torch.Tensor,
        future: torch.Tensor | None,
        proprio: torch.Tensor | None,
        actions: torch.Tensor | None,
        masks: Masks,
        known: torch.Tensor | None = None,
        condition: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """As :meth:`UVANet.forward`: outputs at the future tokens and one feature per action."""
        z = self.decode(self.encode(history, future, proprio, actions, masks, known, condition))
        return z, self.action_pool(z)
