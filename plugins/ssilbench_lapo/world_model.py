"""LAPO's stage 1, shared by ``lapo`` and ``lapo_plus``: a latent IDM and a latent forward
model trained together on D_U to reconstruct s' from s and a quantised latent action.

    z = h~(s, s')          IMPALA-CNN on (s, s') stacked as 2C channels, then linear
    q = VQ(z)              EMA codebooks, straight-through gradients, commitment loss
    s'^ = f~(s, q)         U-Net conditioned on q (the reference's, or ssilbench's smaller one)
    loss = ||s' - s'^||^2 + beta ||z - sg(q)||^2

The stage is trained once per (dataset, stage-1 settings, step budget) and reused: its
network is built under ``world_model_seed`` rather than the run seed, and it reads only
D_U, which is the whole dataset whatever the label budget or seed. The stage cache key is
the content of what it is trained on, so both methods and every seed and label budget of a
game find the same entry (see docs/methods/lapo.md).
"""

from __future__ import annotations

import hashlib
import json
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)
from torch import nn

from ssilbench.api import Policy, RunContext, Stage, omitted_at_default
from ssilbench.kit import (
    ArrayRows,
    ImpalaTrunk,
    RowSource,
    Speed,
    StageBudget,
    TransitionFrames,
    WarmupLinear,
    fit_classifier,
    label_rows,
    labeled_actions,
    mlp,
    optimise,
    pair,
    reuse_or_train,
)
from ssilbench_lapo.quantise import VectorQuantiser
from ssilbench_lapo.unet import LatentUNet, ReferenceUNet

# The paper's model (REFERENCE "Procgen") and a CPU-sized one for tests and smoke runs. The
# reference forward model starts from 24 channels (its configuration's ``wm_scale``, 7.81M
# parameters at 64 x 64); ssilbench's plain U-Net (``forward_model="unet_small"``) has six
# levels from 16 channels, close in size (7.94M parameters, 0.28 GMAC per sample).
SIZES = {
    "paper": {"impala_scale": 4, "unet_widths": (16, 32, 64, 128, 256, 512), "wm_base": 24},
    "small": {"impala_scale": 1, "unet_widths": (16, 32), "wm_base": 8},
}

HEADS = {
    # The reference code: every IMPALA net ends in Linear(256 -> out), decoders are MLPs
    # (192, 128, 64) (its configuration's ``decoder_hidden_sizes``).
    "paper_code": {"trunk_head": (), "decoder": (192, 128, 64)},
    # The paper's text (appendix): MLP heads of (128, 128).
    "paper_text": {"trunk_head": (128, 128), "decoder": (128, 128)},
}


WORLD_MODEL_SCHEDULE = WarmupLinear(start=0.1, warmup=50 / 50_000, end=0.01)
"""Stage 1's learning rate in the reference code: 10% rising to all of it over the first
50 of 50,000 steps, then linear decay to 1% (as shares of the stage: ``warmup_steps`` in
the config makes the warm-up a step count, the reference's)."""

LATER_STAGES_SCHEDULE = WarmupLinear(start=0.01, warmup=1000 / 60_000, end=0.0)
"""The later stages' learning rate in the reference code (the paper's Procgen schedule, as
the ``impala`` architecture trains): 1% rising to all of it over the first 1,000 of 60,000
steps, then linear decay to zero (as shares of the stage; see above)."""


class WorldModelConfig(BaseModel):
    """Settings of LAPO's stage 1 and of the networks both methods build.

    Defaults are the paper's Procgen settings (appendix "ProcGen Experiments", with LAPO's
    quantisation settings) as its reference code implements them; ssilbench's variants are
    options. See docs/methods/lapo.md for each source and the table of differences.
    """

    model_config = ConfigDict(extra="forbid")

    size: Literal["paper", "small"] = Field(
        "paper",
        description="paper: IMPALA x4, forward model base 24 (unet_small: 16..512); "
        "small: IMPALA x1, base 8 (unet_small: 16, 32) (CPU).",
    )
    impala_scale: int | None = Field(
        None, ge=1, description="IMPALA-CNN channel multiplier; None = the size's."
    )
    forward_model: Literal["reference", "unet_small"] = Field(
        "reference",
        description="reference: the reference code's U-Net (BatchNorm residual blocks, "
        "transposed convolutions, the raw latent at the input and as the bottleneck skip); "
        "unet_small: ssilbench's plain double-conv U-Net with the latent projected to 16.",
    )
    wm_base: int | None = Field(
        None,
        ge=2,
        description="reference forward model: channels of its first level; None = size's.",
    )
    unet_widths: tuple[int, ...] | None = Field(
        None,
        min_length=2,
        description="unet_small: channels per level, bottleneck last; None = size's.",
    )
    features: int = Field(256, ge=1, description="IMPALA trunk output features.")
    head: Literal["paper_code", "paper_text"] = Field(
        "paper_code",
        description="paper_code: IMPALA nets end in Linear(256 -> out), decoders MLP "
        "(192,128,64) (the reference code); paper_text: MLP heads (128,128) (the paper's text).",
    )
    centre_obs: bool = Field(
        True, description="Pixels centred at 0 (x/255 - 0.5, the reference's) for every net."
    )
    squash_output: bool = Field(
        True,
        description="Forward model output 0.5 + tanh/2 (LAPO); False: 0.5 + linear "
        "(unet_small only).",
    )
    codebooks: int = Field(2, ge=1, description="Number of VQ codebooks.")
    latents_per_codebook: int = Field(4, ge=1, description="Discrete latents per codebook.")
    code_dim: int = Field(16, ge=1, description="Embedding size of each codebook entry.")
    codebook_size: int = Field(64, ge=2, description="Entries per codebook.")
    ema_decay: float = Field(0.999, gt=0, lt=1, description="EMA decay of the codebooks.")
    ema_eps: float = Field(1e-5, gt=0, description="Laplace smoothing of the EMA code counts.")
    commitment: float = Field(0.05, ge=0, description="Commitment loss weight beta.")
    vq_init: Literal["uniform", "data"] = Field(
        "uniform",
        description="uniform: codebooks uniform in +-5/codebook_size (reference); data: "
        "evenly spaced latents of the first batch (ssilbench).",
    )
    vq_bias_correction: bool = Field(
        False,
        description="True: bias-corrected EMA from zero, a never-chosen code keeps its value "
        "(ssilbench); False: the reference's EMA.",
    )
    vq_restarts: float = Field(
        0.0,
        ge=0,
        description="Restart a code used under this share of its fair use; 0 = never "
        "(reference); ssilbench's variant: 0.1.",
    )
    world_model_fraction: float = Field(
        50 / 120, gt=0, lt=1, description="Share of the steps for stage 1 (paper: 50k of 120k)."
    )
    world_model_lr: float = Field(3e-4, gt=0, description="Adam learning rate of stage 1.")
    world_model_batch: int = Field(128, ge=1, description="Stage-1 minibatch (D_U).")
    grad_clip: float | None = Field(2.0, gt=0, description="Stage-1 gradient-norm clip.")
    world_model_warmup_steps: int | None = Field(
        50, ge=0, description="Stage-1 warm-up in steps (reference: 50); None: 1/1000 of the stage."
    )
    world_model_seed: int = Field(
        0, description="Seed of stage 1 (not the run's: one stage 1 serves every seed)."
    )
    lr: float = Field(2e-4, gt=0, description="Adam learning rate of the later stages.")
    lr_schedule: Literal["warmup_decay", "constant"] = Field(
        "warmup_decay",
        description="warmup_decay: the reference code's warm-up then linear decay per stage.",
    )
    warmup_steps: int | None = Field(
        1000,
        ge=0,
        description="Later stages' warm-up in steps (reference: 1000); None: 1/60 of each stage.",
    )
    batch_size: int = Field(
        128, ge=1, description="Minibatch of the later stages: this on D_U, min(this, N_L) on D_L."
    )
    fast_cuda: bool = Field(
        True, description="bf16 autocast and channels-last convolutions on CUDA (not on CPU)."
    )
    memory_format: Literal["channels_last", "contiguous"] = Field(
        "channels_last",
        description="Layout of the image networks' tensors in float32 training on CPU: "
        "channels_last (1.2-1.5x faster per step there) or contiguous (ssilbench before "
        "results revision 1). On CUDA fast_cuda decides.",
    )

    # memory_format came after runs were recorded: at its default, a config serialises as
    # it did before (the plugin's RESULTS_REVISION marks the new results).
    _serialise = omitted_at_default("memory_format")

    @model_validator(mode="after")
    def _options_fit_the_forward_model(self) -> WorldModelConfig:
        if self.forward_model == "reference":
            if not self.squash_output:
                raise ValueError(
                    "squash_output=False needs forward_model='unet_small' (the reference "
                    "forward model always ends in tanh / 2)"
                )
            if self.unet_widths is not None:
                raise ValueError("unet_widths sizes forward_model='unet_small'; use wm_base")
        elif self.wm_base is not None:
            raise ValueError("wm_base sizes forward_model='reference'; use unet_widths")
        return self

    @property
    def base(self) -> int:
        return self.wm_base or SIZES[self.size]["wm_base"]

    @property
    def trunk_head(self) -> tuple[int, ...]:
        """Hidden widths of the head on an IMPALA trunk (latent policy, LAPO+'s policy)."""
        return HEADS[self.head]["trunk_head"]

    @property
    def decoder_hidden(self) -> tuple[int, ...]:
        """Hidden widths of a decoding head phi(a | z)."""
        return HEADS[self.head]["decoder"]

    @property
    def scale(self) -> int:
        return self.impala_scale or SIZES[self.size]["impala_scale"]

    @property
    def widths(self) -> tuple[int, ...]:
        return self.unet_widths or SIZES[self.size]["unet_widths"]

    @property
    def latent_dim(self) -> int:
        return self.codebooks * self.latents_per_codebook * self.code_dim

    def world_model_steps(self, total_steps: int) -> int:
        return round(total_steps * self.world_model_fraction)

    @property
    def later_schedule(self) -> WarmupLinear | None:
        """The learning-rate schedule of the stages after stage 1 (None: constant)."""
        return schedules(self)[1]

    def split_steps(self, total_steps: int, fraction: float) -> tuple[Stage, int, int]:
        """Stage 1, then the steps of stage 2 (``fraction`` of the total) and of stage 3
        (the rest): the split both methods declare."""
        world = self.world_model_stage(total_steps)
        second = round(total_steps * fraction)
        return world, second, total_steps - world.steps - second

    def world_model_stage(self, total_steps: int) -> Stage:
        """Stage 1, declared shared: every run of either method with these stage-1 settings
        trains the same model on a game (see the module docstring)."""
        steps = self.world_model_steps(total_steps)
        return Stage("world_model", steps, data="unlabeled",
                     share=f"lapo_world_model:{self.digest(WorldModelConfig)}:{steps}")  # fmt: skip

    def digest(self, fields_of: type[BaseModel]) -> str:
        """A short hash of this config's values of the fields ``fields_of`` declares."""
        values = {k: getattr(self, k) for k in fields_of.model_fields}
        text = json.dumps(values, sort_keys=True, default=list)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ChannelsLast(Speed):
    """float32 with the image networks and their batches in ``torch.channels_last``: on CPU
    the convolutions of every LAPO stage run 1.2-1.5x faster per step in this layout
    (docs/methods/lapo.md, Speed), and the bits stay reproducible (one layout, one set of
    kernels). ``enabled`` is what the kit's stage and label caches key on: True keeps what
    this layout trains apart from the plain float32 path's (``repr`` names this class)."""

    enabled: bool = True

    def autocast(self):
        return nullcontext()

    def images(self, x: torch.Tensor) -> torch.Tensor:
        return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x

    def module(self, net: nn.Module) -> nn.Module:
        return net.to(memory_format=torch.channels_last)

    def forward(self, net: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return net(self.images(x))


def speed_for(cfg: WorldModelConfig, device: torch.device) -> Speed:
    """How the stages train on ``device``: bf16 and channels-last on CUDA (``fast_cuda``),
    else float32 in the config's ``memory_format``."""
    speed = Speed.for_device(cfg.fast_cuda, device)
    if speed.enabled or device.type == "cuda" or cfg.memory_format == "contiguous":
        return speed
    return ChannelsLast()


class Centre(nn.Module):
    """x - 0.5: pixels in [0, 1] to the reference's [-0.5, 0.5] (no parameters)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - 0.5


def impala_net(cfg: WorldModelConfig, in_shape: tuple[int, ...], out: int) -> nn.Sequential:
    """IMPALA-CNN trunk on images of ``in_shape`` (C, H, W) with the config's head to ``out``
    (pixels centred first when ``cfg.centre_obs``)."""
    c, h, w = in_shape
    trunk = ImpalaTrunk(c, cfg.scale, cfg.features, image_size=(h, w))
    layers = [Centre()] if cfg.centre_obs else []
    return nn.Sequential(*layers, trunk, mlp(cfg.features, cfg.trunk_head, out))


def decoder_net(cfg: WorldModelConfig, out: int) -> nn.Sequential:
    """A decoding head phi(a | z) from a latent action to ``out`` logits."""
    return mlp(cfg.latent_dim, cfg.decoder_hidden, out)


def action_policy_net(cfg: WorldModelConfig, in_shape: tuple[int, ...], out: int) -> nn.Sequential:
    """LAPO+'s policy pi^(a | s): with the reference code's heads, an IMPALA net to a latent
    followed by a decoding head (its ``policy.decoder``); with the paper text's, an IMPALA
    net with an MLP head to the actions."""
    if cfg.head == "paper_text":
        return impala_net(cfg, in_shape, out)
    return nn.Sequential(*impala_net(cfg, in_shape, cfg.latent_dim), *decoder_net(cfg, out))


class LatentIDM(nn.Module):
    """h~(s, s'): the continuous (pre-quantisation) latent action of a transition."""

    def __init__(self, cfg: WorldModelConfig, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        c, h, w = obs_shape
        self.trunk = ImpalaTrunk(2 * c, cfg.scale, cfg.features, image_size=(h, w))
        self.head = nn.Linear(cfg.features, cfg.latent_dim)
        self.offset = 0.5 if cfg.centre_obs else 0.0

    def encode(self, pairs: torch.Tensor) -> torch.Tensor:
        """h~ on (s, s') already stacked by ``ssilbench.kit.pair``."""
        return self.head(self.trunk(pairs - self.offset if self.offset else pairs))

    def forward(self, obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        return self.encode(pair(obs, next_obs))


class PairedLatentIDM(nn.Module):
    """The latent IDM on (s, s') already stacked by ``ssilbench.kit.pair`` (the
    ``pair`` inputs of ``TransitionFrames``)."""

    def __init__(self, idm: LatentIDM) -> None:
        super().__init__()
        self.idm = idm

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        return self.idm.encode(pairs)


class WorldModel(nn.Module):
    """Latent IDM, quantiser and latent forward model, trained together in stage 1."""

    def __init__(self, cfg: WorldModelConfig, obs_shape: tuple[int, ...]) -> None:
        super().__init__()
        self.idm = LatentIDM(cfg, obs_shape)
        self.quantiser = VectorQuantiser(cfg.codebooks, cfg.latents_per_codebook, cfg.code_dim,
                                         cfg.codebook_size, cfg.ema_decay, cfg.ema_eps,
                                         cfg.commitment, cfg.vq_restarts, cfg.vq_init,
                                         cfg.vq_bias_correction)  # fmt: skip
        c, h, w = obs_shape
        self.forward_model: nn.Module
        if cfg.forward_model == "reference":
            self.forward_model = ReferenceUNet(c, cfg.latent_dim, (h, w), cfg.base)
        else:
            self.forward_model = LatentUNet(c, cfg.latent_dim, cfg.widths, squash=cfg.squash_output)

    def loss(self, obs: torch.Tensor, next_obs: torch.Tensor) -> torch.Tensor:
        quantised = self.quantiser(self.idm(obs, next_obs))
        predicted = self.forward_model(obs, quantised.latent)
        # in the targets' precision: float32 under bf16 autocast
        return F.mse_loss(predicted.to(next_obs.dtype), next_obs) + quantised.commitment


def schedules(cfg: WorldModelConfig) -> tuple[WarmupLinear | None, WarmupLinear | None]:
    """The learning-rate schedules of stage 1 and of the later stages (None: constant)."""
    if cfg.lr_schedule == "constant":
        return None, None
    return (
        replace(WORLD_MODEL_SCHEDULE, warmup_steps=cfg.world_model_warmup_steps),
        replace(LATER_STAGES_SCHEDULE, warmup_steps=cfg.warmup_steps),
    )


def _settings(cfg: WorldModelConfig) -> dict:
    # What shapes the trained weights beyond the starting weights and the data. The network's
    # shapes are in its state dict already; the quantiser's EMA constants and the optimiser
    # settings are not.
    return {
        "stage": "lapo_world_model",
        "lr": cfg.world_model_lr,
        "batch": cfg.world_model_batch,
        "clip": cfg.grad_clip,
        "seed": cfg.world_model_seed,
        "ema": (cfg.ema_decay, cfg.ema_eps),
        "commitment": cfg.commitment,
        "restart": cfg.vq_restarts,
        "vq": (cfg.vq_init, cfg.vq_bias_correction),
        "forward_model": cfg.forward_model,
        "centre": cfg.centre_obs,
        "squash": cfg.squash_output,
        "fast_cuda": cfg.fast_cuda,
    }


def train_world_model(
    ctx: RunContext, cfg: WorldModelConfig, unlabeled: TransitionFrames, budget: StageBudget
) -> WorldModel:
    """Stage 1 on D_U (``unlabeled``, on ``ctx.device``), or the identical stage 1 trained
    before; returned frozen, in eval mode."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.world_model_seed)
        model = WorldModel(cfg, ctx.spec.obs_shape)
    speed = speed_for(cfg, ctx.device)

    def train() -> None:
        net = speed.module(model.to(ctx.device))

        def loss(rows):
            obs, next_obs = unlabeled.pairs(rows)
            with speed.autocast():
                return net.loss(speed.images(obs), speed.images(next_obs))

        optimise(net.parameters(), loss, len(unlabeled), budget, lr=cfg.world_model_lr,
                 batch_size=cfg.world_model_batch, seed=cfg.world_model_seed,
                 clip_grad_norm=cfg.grad_clip, schedule=schedules(cfg)[0],
                 prefetch=unlabeled.prefetch)  # fmt: skip

    settings = {**_settings(cfg), "data": unlabeled.fingerprint,
                "schedule": repr(schedules(cfg)[0])}  # fmt: skip
    if isinstance(speed, ChannelsLast):  # other layouts keep the keys they always had
        settings["memory_format"] = "channels_last"
    reuse_or_train("lapo_world_model", model, [], settings, budget, ctx.device, train)
    model = speed.module(model.to(ctx.device)).eval()
    return model.requires_grad_(False)


def latents_of(
    ctx: RunContext, world: WorldModel, frames: TransitionFrames, speed: Speed
) -> ArrayRows:
    """The frozen latent IDM's pre-quantisation latents h~(s, s') of every transition of
    ``frames``, computed once per world model and data (every lapo and lapo_plus run of a
    game reads the same D_U latents)."""
    return label_rows(ctx.plan.cache, PairedLatentIDM(world.idm), frames.inputs("pair"),
                      ctx.device, speed, probs=False)  # fmt: skip


def stage_one(ctx: RunContext) -> tuple[Speed, TransitionFrames, WorldModel]:
    """Where both methods start a run: how their networks train on the run's device, D_U's
    frames, and stage 1's world model (trained, or the identical one trained before)."""
    cfg: WorldModelConfig = ctx.config
    speed = speed_for(cfg, ctx.device)
    unlabeled = TransitionFrames(ctx.unlabeled, ctx.device)
    return speed, unlabeled, train_world_model(ctx, cfg, unlabeled, ctx.plan.stage("world_model"))


def fit_decoder(
    ctx: RunContext,
    decoder: nn.Module,
    latents: RowSource,
    stage: str,
    policy: Policy | None = None,
) -> None:
    """Fit a decoding head phi(a | z) by cross-entropy from the latents of D_L's transitions
    to their actions, as the run's ``stage`` (``policy`` evaluated during it)."""
    cfg: WorldModelConfig = ctx.config
    fit_classifier(
        decoder, latents, labeled_actions(ctx.labeled, ctx.device),
        ctx.plan.stage(stage, policy=policy),
        lr=cfg.lr, batch_size=min(cfg.batch_size, len(latents)), seed=ctx.stream_seed(stage),
        rule=ctx.stopping, schedule=cfg.later_schedule,
    )  # fmt: skip
