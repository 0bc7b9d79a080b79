"""UVA's settings, given to any method that uses it as ``-c arch_options='{...}'``.

``uva`` is a small model that trains on a CPU in minutes; ``uva_base`` has the paper's
sizes (a MAR-B backbone: width 768, 12 + 12 blocks; KL-16 autoencoder with 128 base
channels; diffusion heads of 6 blocks of 1024) and its optimisation settings (learning rate
2e-5, batch 128, 50k pretraining steps), which is GPU work.

The defaults follow the UVA reference code (``ShuangLI59/unified_video_action``): fused
tokens, the pooled action head, one truncated-normal mask ratio per batch, AdamW with a
cosine schedule, EMA weights, dropout 0.1, bf16 on CUDA; on LIBERO-10 the agent-view camera
(and the language condition) only and the 6-D rotation of its actions. The profile ``paper``
(the default) adds the reference's data and diffusion settings: 256-pixel frames, every fourth
frame of history, DDPM with a learned variance sampled at temperature 0.95, its augmentation
and its inputs; ``small`` keeps the CPU-fast settings (``PROFILES``). What ssilbench did
before is one option away each (``docs/methods/uva.md``, "The reference code, the defaults and
the options"); ``LEGACY`` collects them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PROFILES: dict[str, dict[str, object]] = {
    # The reference code's: img_size 256, select_frames (t-12, t-8, t-4, t), DiT's Gaussian
    # diffusion with a learned variance over 1000 noise levels, sampled by DDPM over 100
    # (config/model/uva.yaml, create_diffusion's default diffusion_steps).
    "paper": {
        "image_size": 256,
        "history_stride": 4,
        "diffusion": "ddpm",
        "diffusion_steps": 1000,
        "sample_steps": 100,
    },
    # CPU-fast: the frames as they are, consecutive history frames, DDIM on noise MSE over
    # 100 levels, 10 sampling steps.
    "small": {
        "image_size": None,
        "history_stride": 1,
        "diffusion": "ddim",
        "diffusion_steps": 100,
        "sample_steps": 10,
    },
}
"""The fields each profile sets when arch_options leave them out (``augment`` and ``inputs``
depend on the environment as well: ``resolve`` in ``ssilbench_uva.task_setup``)."""


class UVAOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: Literal["paper", "small"] = Field(
        "paper",
        description="paper: the reference code's data and diffusion settings (256-pixel frames, "
        "history stride 4, DDPM with a learned variance at temperature 0.95, its augmentation "
        "and inputs); small: the CPU-fast ones (the frames as they are, stride 1, DDIM on noise "
        "MSE, no augmentation, every input on Push-T). A field given explicitly wins.",
    )

    # transformer backbone
    width: int = Field(64, ge=8, description="Token width.")
    depth: int = Field(2, ge=1, description="Transformer blocks (half encoder, half decoder).")
    heads: int = Field(4, ge=1, description="Attention heads (must divide width).")
    token_layout: Literal["fused", "sequence"] = Field(
        "fused",
        description="fused: one token per future-frame patch, its history patch, action and "
        "proprioception concatenated along channels and projected (the reference); sequence: "
        "every history, future, proprioception and action token in the sequence.",
    )
    dropout: float = Field(
        0.1, ge=0, lt=1, description="Attention and projection dropout (reference 0.1)."
    )
    # heads
    head_width: int = Field(128, ge=8, description="Width of the diffusion heads' MLPs.")
    head_depth: int = Field(2, ge=1, description="Residual blocks of the diffusion heads.")
    action_head: Literal["reference", "per_token", "linear"] = Field(
        "reference",
        description="reference: future-frame outputs pooled (conv + FC per frame, frames -> "
        "actions by a linear map, refined) into a diffusion MLP per action; per_token: a "
        "diffusion MLP on each action token's output (sequence layout); linear: a linear map "
        "with SmoothL1 (beta 1) on the same features.",
    )
    diffusion_steps: int = Field(
        1000,
        ge=2,
        description="Noise levels of the diffusion heads. Default: the profile's "
        "(paper 1000, the reference's; small 100).",
    )
    sample_steps: int = Field(
        100,
        ge=1,
        description="Denoising steps per sample. Default: the profile's (paper 100, "
        "the reference's; small 10).",
    )
    diffusion: Literal["ddpm", "ddim"] = Field(
        "ddpm",
        description="ddpm: the reference's Gaussian diffusion (noise and a variance predicted, "
        "noise MSE + the variational bound; ancestral DDPM over sample_steps respaced steps, "
        "its noise scaled by temperature); ddim: noise MSE, deterministic DDIM. Default: the "
        "profile's.",
    )
    temperature: float = Field(
        0.95, gt=0, description="diffusion=ddpm: scale of the sampling noise (reference 0.95)."
    )
    noise_schedule: Literal["reference", "clamped"] = Field(
        "reference",
        description="The diffusion heads' cosine schedule. reference: its betas clipped at "
        "0.999 (the reference's); clamped: ssilbench's earlier DDIM schedule, the cumulative "
        "alphas clamped to [1e-5, 0.9999] (diffusion=ddim only).",
    )
    # optional conditioning input (e.g. a language embedding per window)
    condition_dim: int | None = Field(
        None, ge=1, description="Width of a conditioning vector per window; None = none."
    )
    condition_tokens: int = Field(
        64, ge=1, description="Tokens the condition occupies in the sequence (reference 64)."
    )
    condition_drop: float = Field(
        0.1, ge=0, le=1, description="Training share of windows whose condition is replaced "
        "by the learned null condition (reference label_drop_prob 0.1).",
    )  # fmt: skip
    # what the model reads and how it represents actions
    inputs: Literal["auto", "main", "all"] = Field(
        "auto",
        description="main: the main camera only (and a multitask task's conditioning vector); "
        "all: every camera and proprioceptive extra of the environment; auto: the reference's "
        "setup where ssilbench follows its config (libero10 and, with profile paper, pusht: "
        "main), all elsewhere.",
    )
    actions: Literal["auto", "rotation_6d", "native"] = Field(
        "auto",
        description="rotation_6d: the axis-angle the environment declares becomes the 6-D "
        "rotation, positions are scaled by their range over D_L (the reference's LIBERO "
        "setup); native: the environment's actions scaled from its bounds; auto: rotation_6d "
        "on libero10, native elsewhere.",
    )
    # window
    history: int | None = Field(
        None, ge=1, description="History frames; None = as many as future frames (the "
        "reference's 4); the sequence layout takes fewer where the frame stack holds fewer.",
    )  # fmt: skip
    history_stride: int = Field(
        4,
        ge=1,
        description="Frames between history frames: t-(history-1)*stride .. t (the reference: "
        "4, t-12 .. t; needs an environment frame stack of (history-1)*stride+1). Default: the "
        "profile's (paper 4, small 1).",
    )
    future: int = Field(4, ge=1, description="Future frames (spread over the action chunk).")
    chunk: int | None = Field(None, ge=1, description="Actions per chunk; None = the env's.")
    # image autoencoder
    image_size: int | None = Field(
        256,
        ge=16,
        description="Side of the square images the autoencoder sees, resized bilinearly from "
        "the environment's frames; None = the frames as they are. Default: the profile's "
        "(paper 256, the reference's; small None).",
    )
    augment: Literal["auto", "colour_jitter", "crop_blur", "none"] = Field(
        "auto",
        description="Training images, the same draw for every frame of a window: colour_jitter "
        "(brightness, contrast, saturation 0.2, hue 0.05; the reference on LIBERO-10); "
        "crop_blur (a 95% crop resized back and a Gaussian blur, each with probability 0.5; "
        "the reference on Push-T); none; auto: the profile's (paper: the reference's for the "
        "environment, small: none).",
    )
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
        None, description="Local pretrained backbone (a MAR-B checkpoint by default)."
    )
    checkpoint_layout: Literal["reference", "by_name"] = Field(
        "reference",
        description="reference: checkpoints have the public MAR-B / KL-16 key layout and load by "
        "its documented mapping (missing or unexpected keys are refused); by_name: every tensor "
        "whose name and shape match loads, the rest is left.",
    )
    # shared initialisation and training
    pretrain_steps: int = Field(
        200, ge=0, description="Video-model pretraining on D_U shared by every method (paper 50k)."
    )
    lr: float = Field(3e-4, gt=0, description="Peak learning rate (paper 2e-5).")
    batch_size: int = Field(32, ge=1, description="Windows per minibatch (paper 128).")
    optimizer: Literal["adamw", "adam"] = Field("adamw", description="AdamW (reference) or Adam.")
    weight_decay: float = Field(
        0.02, ge=0, description="AdamW's decay of matrices (not of biases, norms, 1-D tensors)."
    )
    betas: tuple[float, float] = Field((0.9, 0.95), description="Adam(W) betas (reference).")
    schedule: Literal["cosine", "constant"] = Field(
        "cosine", description="cosine: warm-up, then half a cosine to 0 at the stage's end."
    )
    warmup_steps: int = Field(1000, ge=0, description="Linear warm-up from 0, in steps.")
    ema: float = Field(
        0.9999, ge=0, lt=1, description="EMA's largest decay (reference 0.9999; 0 = no EMA). "
        "Stages end on the EMA weights, which are evaluated and trained further.",
    )  # fmt: skip
    ema_power: float = Field(0.75, gt=0, description="EMA warm-up: decay = 1 - (1 + step)^-power.")
    precision: Literal["auto", "bf16", "fp32"] = Field(
        "auto",
        description="auto or bf16: bf16 autocast on CUDA (a CPU run stays fp32, which keeps it "
        "bit-reproducible); fp32 everywhere.",
    )
    masking: Literal["reference", "uniform"] = Field(
        "reference",
        description="reference: one truncated-normal ratio per batch, the same patches in every "
        "future frame, in video, forward and full modes; uniform: a ratio per window from "
        "[min_mask_ratio, 1], positions per token, video mode only (forward/full hide all).",
    )
    min_mask_ratio: float = Field(
        0.7, ge=0, le=1, description="Least masked share of future tokens."
    )
    init_seed: int = Field(0, description="Seed of the shared initialisation and pretraining.")

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: object) -> object:
        # The profile fills the fields arch_options leave out (an explicit null is kept).
        if isinstance(data, dict) and data.get("profile", "paper") in PROFILES:
            return {**PROFILES[data.get("profile", "paper")], **data}
        return data

    @model_validator(mode="after")
    def _combinations(self) -> UVAOptions:
        if self.token_layout == "fused" and self.action_head == "per_token":
            raise ValueError(
                "action_head=per_token reads action tokens, which only token_layout=sequence "
                "has; use action_head=reference or linear, or token_layout=sequence."
            )
        if self.noise_schedule == "clamped" and self.diffusion != "ddim":
            raise ValueError(
                "noise_schedule=clamped is ssilbench's earlier DDIM schedule and needs "
                "diffusion=ddim (profile small); leave noise_schedule out with diffusion=ddpm."
            )
        return self


LEGACY: dict[str, object] = {
    "profile": "small",
    "token_layout": "sequence",
    "action_head": "per_token",
    "masking": "uniform",
    "optimizer": "adam",
    "schedule": "constant",
    "warmup_steps": 0,
    "ema": 0.0,
    "dropout": 0.0,
    "precision": "fp32",
    "checkpoint_layout": "by_name",
    "inputs": "all",
    "actions": "native",
    "noise_schedule": "clamped",
}
"""ssilbench's UVA before the reference defaults: ``arch_options`` giving these reproduce it."""


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
