"""LAPO+ (the paper's section 5.1): LAPO's stage 1, then IDM learning and IDM labeling with
the latent IDM as a pretrained backbone.

Stage 1 (``world_model``, D_U): LAPO's, the very same trained model (shared cache entry).
Stage 2 (``idm_decoder``, D_L): a decoding head phi(a | z) fitted by cross-entropy on the
    frozen latent IDM's pre-quantisation latents z = h~(s, s') of the labeled transitions;
    h^ = phi o h~ is an IDM for the true actions.
Stage 3 (``policy``, D_U): every unlabeled transition labeled by h^ (soft: the paper's
    expectation under h^; or hard: its argmax) and a policy pi^(a | s) cloned from them.

Steps: 50k / 10k / 60k of the paper's 120k, i.e. these shares of the run's total steps.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from ssilbench.api import EnvSpec, Method, RunContext, Stage
from ssilbench.train.memo import reuse_or_train
from ssilbench.train.supervised import ClassifierPolicy, fit_classifier
from ssilbench_baselines.impala import mlp
from ssilbench_lapo.frames import (
    Speed,
    TransitionFrames,
    fit_on_frames,
    in_chunks,
)
from ssilbench_lapo.world_model import (
    LatentIDM,
    WorldModelConfig,
    impala_net,
    schedules,
    train_world_model,
)


class LAPOPlusConfig(WorldModelConfig):
    """LAPO+'s settings: stage 1's (inherited, shared with lapo), the split and the labels."""

    idm_decoder_fraction: float = Field(
        10 / 120, gt=0, lt=1, description="Share of the steps for stage 2 (paper: 10k of 120k)."
    )
    labels: Literal["soft", "hard"] = Field(
        "soft", description="soft: expectation under the decoded IDM (paper); hard: its argmax."
    )


class DecodedIDM(nn.Module):
    """h^(a | s, s') = phi(h~(s, s')) on (s, s') stacked as by ``ssilbench.data.tensors.pair``
    (the form ``ClassifierPolicy.idm`` expects)."""

    def __init__(self, latent_idm: LatentIDM, decoder: nn.Module) -> None:
        super().__init__()
        self.latent_idm = latent_idm
        self.decoder = decoder

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.latent_idm.head(self.latent_idm.trunk(pairs)))


class LAPOPlus(Method):
    description = "LAPO's stage 1, latent IDM decoded on D_L, then IDM labeling of D_U."
    Config = LAPOPlusConfig

    def stages(self, cfg: LAPOPlusConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        world = cfg.world_model_stage(total_steps)
        decode = round(total_steps * cfg.idm_decoder_fraction)
        return [
            world,
            Stage("idm_decoder", decode, data="labeled"),
            Stage("policy", total_steps - world.steps - decode, policy=True, data="unlabeled"),
        ]

    def fit(self, ctx: RunContext) -> ClassifierPolicy:
        cfg: LAPOPlusConfig = ctx.config
        spec, device = ctx.spec, ctx.device
        speed = Speed.for_device(cfg.fast_cuda, device)
        unlabeled = TransitionFrames.from_view(ctx.unlabeled).to(device)
        world = train_world_model(ctx, cfg, unlabeled, ctx.plan.stage("world_model"))

        def latents_of(frames: TransitionFrames) -> torch.Tensor:
            def chunk(rows):
                with speed.autocast():
                    return world.idm(*map(speed.images, frames.pairs(rows)))

            return in_chunks(chunk, len(frames))

        # Stage 2: phi decodes the frozen latent IDM's latents of D_L into true actions.
        labeled = TransitionFrames.from_view(ctx.labeled).to(device)
        actions = torch.as_tensor(ctx.labeled.actions, dtype=torch.long, device=device)
        latents = latents_of(labeled)
        with ctx.seeded():
            decoder = mlp(cfg.latent_dim, cfg.head_hidden, spec.num_actions)
            net = speed.module(impala_net(cfg, spec.obs_shape, spec.num_actions))
        decoder.to(device)
        fit_classifier(
            decoder, latents, actions, ctx.plan.stage("idm_decoder"),
            lr=cfg.lr, batch_size=min(cfg.batch_size, len(latents)), seed=ctx.seed,
            rule=ctx.stopping, schedule=schedules(cfg)[1],
        )  # fmt: skip
        decoder.eval().requires_grad_(False)
        policy = ClassifierPolicy(net.to(device), idm=DecodedIDM(world.idm, decoder))

        # Stage 3: label D_U with h^ = phi o h~, then clone pi^ from the labels.
        with torch.no_grad():
            probs = F.softmax(decoder(latents_of(unlabeled)), dim=-1)
        targets = probs if cfg.labels == "soft" else probs.argmax(-1)
        budget = ctx.plan.stage("policy", policy=policy)
        settings = {"lr": cfg.lr, "batch": cfg.batch_size, "seed": ctx.seed + 1,
                    "rule": repr(ctx.stopping), "data": unlabeled.digest,
                    "fast_cuda": cfg.fast_cuda, "schedule": repr(schedules(cfg)[1])}  # fmt: skip
        reuse_or_train(
            "lapo_plus_policy", net, [targets], settings, budget, device,
            lambda: fit_on_frames(
                net, unlabeled, targets, _cross_entropy, budget, lr=cfg.lr,
                batch_size=cfg.batch_size, seed=ctx.seed + 1, speed=speed, rule=ctx.stopping,
                schedule=schedules(cfg)[1],
            ),
        )  # fmt: skip
        return policy


def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """To hard labels (long targets) or to distributions (float targets)."""
    if targets.is_floating_point():
        return -(targets * F.log_softmax(logits, dim=-1)).sum(-1).mean()
    return F.cross_entropy(logits, targets)
