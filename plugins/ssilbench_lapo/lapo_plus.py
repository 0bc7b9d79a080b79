"""LAPO+ (the paper's section 5.1): LAPO's stage 1, then IDM learning and IDM labeling with
the latent IDM as a pretrained backbone.

Stage 1 (``world_model``, D_U): LAPO's, the very same trained model (shared cache entry).
Stage 2 (``idm_decoder``, D_L): a decoding head phi(a | z) fitted by cross-entropy on the
    frozen latent IDM's pre-quantisation latents z = h~(s, s') of the labeled transitions;
    h^ = phi o h~ is an IDM for the true actions.
Stage 3 (``policy``, D_U): every unlabeled transition labeled by h^ (hard: its argmax, as
    the reference code does; or soft: the expectation under h^, as the paper's text reads)
    and a policy pi^(a | s) cloned from them.

Steps: 50k / 10k / 60k of the paper's 120k, i.e. these shares of the run's total steps.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from ssilbench.api import EnvSpec, Method, RunContext, Stage
from ssilbench.kit import (
    ArgmaxRows,
    ClassifierPolicy,
    TransitionFrames,
    fit_classifier,
    label_rows,
)
from ssilbench_lapo.world_model import (
    LatentIDM,
    WorldModelConfig,
    action_policy_net,
    decoder_net,
    fit_decoder,
    latents_of,
    stage_one,
)


class LAPOPlusConfig(WorldModelConfig):
    """LAPO+'s settings: stage 1's (inherited, shared with lapo), the split and the labels."""

    idm_decoder_fraction: float = Field(
        10 / 120, gt=0, lt=1, description="Share of the steps for stage 2 (paper: 10k of 120k)."
    )
    labels: Literal["hard", "soft"] = Field(
        "hard",
        description="hard: the decoded IDM's argmax (the reference code); soft: the "
        "expectation under it (the paper's text).",
    )


class DecodedIDM(nn.Module):
    """h^(a | s, s') = phi(h~(s, s')) on (s, s') stacked as by ``ssilbench.kit.pair``
    (the form ``ClassifierPolicy.idm`` expects)."""

    def __init__(self, latent_idm: LatentIDM, decoder: nn.Module) -> None:
        super().__init__()
        self.latent_idm = latent_idm
        self.decoder = decoder

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.latent_idm.encode(pairs))


class LAPOPlus(Method):
    description = "LAPO's stage 1, latent IDM decoded on D_L, then IDM labeling of D_U."
    Config = LAPOPlusConfig

    def stages(self, cfg: LAPOPlusConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        world, decode, clone = cfg.split_steps(total_steps, cfg.idm_decoder_fraction)
        return [
            world,
            Stage("idm_decoder", decode, data="labeled"),
            Stage("policy", clone, policy=True, data="unlabeled"),
        ]

    def fit(self, ctx: RunContext) -> ClassifierPolicy:
        cfg: LAPOPlusConfig = ctx.config
        spec, device = ctx.spec, ctx.device
        speed, unlabeled, world = stage_one(ctx)

        # Stage 2: phi decodes the frozen latent IDM's latents of D_L into true actions.
        labeled = TransitionFrames(ctx.labeled, device)
        latents = latents_of(ctx, world, labeled, speed)
        with ctx.seeded():
            decoder = decoder_net(cfg, spec.num_actions)
            net = speed.module(action_policy_net(cfg, spec.obs_shape, spec.num_actions))
        decoder.to(device)
        fit_decoder(ctx, decoder, latents, "idm_decoder")
        decoder.eval().requires_grad_(False)
        policy = ClassifierPolicy(net.to(device), idm=DecodedIDM(world.idm, decoder))

        # Stage 3: label D_U with h^ = phi o h~ (phi over D_U's latents, which every lapo and
        # lapo_plus run of the game shares), then clone pi^ from the labels.
        probs = label_rows(ctx.plan.cache, decoder, latents_of(ctx, world, unlabeled, speed),
                           device)  # fmt: skip
        fit_classifier(
            net, unlabeled.inputs("obs"), probs if cfg.labels == "soft" else ArgmaxRows(probs),
            ctx.plan.stage("policy", policy=policy),
            lr=cfg.lr, batch_size=cfg.batch_size, seed=ctx.stream_seed("policy"),
            rule=ctx.stopping,
            schedule=cfg.later_schedule, speed=speed,
        )  # fmt: skip
        return policy
