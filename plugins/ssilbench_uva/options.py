"""UVA's settings, given to any method that uses it as ``-c arch_options='{...}'``.

``uva`` is a small model that trains on a CPU in minutes; ``uva_base`` has the paper's
sizes (a MAR-B backbone: width 768, 12 + 12 blocks; KL-16 autoencoder with 128 base
channels; diffusion heads of 6 blocks of 1024) and its optimisation settings (learning rate
2e-5, batch 128, 50k pretraining steps), which is GPU work.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class UVAOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # transformer backbone
    width: int = Field(64, ge=8, description="Token width.")
    depth: int = Field(2, ge=1, description="Transformer blocks (half encoder, half decoder).")
    heads: int = Field(4, ge=1, description="Attention heads (must divide width).")
    # heads
    head_width: int = Field(128, ge=8, description="Width of the diffusion heads' MLPs.")
    head_depth: int = Field(2, ge=1, description="Residual blocks of the diffusion heads.")
    action_head: Literal["diffusion", "linear"] = Field(
        "diffusion", description="Diffusion action head, or the linear variant (SmoothL1, beta 1)."
    )
    diffusion_steps: int = Field(100, ge=2, description="Noise levels of the diffusion heads.")
    sample_steps: int = Field(10, ge=1, description="DDIM steps per sample.")
    # window
    history: int | None = Field(None, ge=1, description="History frames; None = the env's stack.")
    future: int = Field(4, ge=1, description="Future frames (spread over the action chunk).")
    chunk: int | None = Field(None, ge=1, description="Actions per chunk; None = the env's.")
    # image autoencoder
    vae_ch: int = Field(8, ge=4, description="Autoencoder base channels (KL-16: 128).")
    vae_ch_mult: tuple[int, ...] = Field((1, 1, 2, 2, 4), description="Channel multipliers.")
    vae_blocks: int = Field(1, ge=1, description="Residual blocks per level (KL-16: 2).")
    latent_channels: int = Field(16, ge=1, description="Latent channels (KL-16: 16).")
    vae_attention: bool = Field(
        False, description="Self-attention in the autoencoder's lowest level (KL-16: true)."
    )
    vae_checkpoint: str | None = Field(
        None, description="Local pretrained autoencoder weights; None = train one on D_U."
    )
    vae_steps: int = Field(200, ge=0, description="Autoencoder training steps on D_U.")
    vae_lr: float = Field(1e-3, gt=0)
    vae_batch: int = Field(16, ge=1)
    backbone_checkpoint: str | None = Field(
        None, description="Local pretrained backbone (MAR-B style), loaded by name and shape."
    )
    # shared initialisation and training
    pretrain_steps: int = Field(
        200, ge=0, description="Video-model pretraining on D_U shared by every method (paper 50k)."
    )
    lr: float = Field(3e-4, gt=0, description="Adam learning rate (paper 2e-5).")
    batch_size: int = Field(32, ge=1, description="Windows per minibatch (paper 128).")
    min_mask_ratio: float = Field(0.7, ge=0, le=1, description="Video mode's least masked share.")
    init_seed: int = Field(0, description="Seed of the shared initialisation and pretraining.")


class UVABaseOptions(UVAOptions):
    """The paper's sizes and optimisation settings."""

    width: int = 768
    depth: int = 24
    heads: int = 12
    head_width: int = 1024
    head_depth: int = 6
    diffusion_steps: int = 1000
    sample_steps: int = 100
    vae_ch: int = 128
    vae_blocks: int = 2
    vae_attention: bool = True
    vae_steps: int = 20000
    vae_batch: int = 64
    pretrain_steps: int = 50000
    lr: float = 2e-5
    batch_size: int = 128
