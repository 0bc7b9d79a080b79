"""LAPO (Schmidt & Jiang 2024) as the paper runs it on Procgen (sections 2.3.3 and 5.1).

Stage 1 (``world_model``, D_U): latent IDM + latent forward model with quantised latent
    actions (``ssilbench_lapo.world_model``), shared with ``lapo_plus`` and across seeds.
Stage 2 (``latent_policy``, D_U): pi~(s) regressed (MSE) onto the frozen latent IDM's
    pre-quantisation latents h~(s, s') of every unlabeled transition; one per game, trained
    under ``latent_policy_seed`` and shared by every seed as in the paper's runs, or one
    per run seed (``latent_policy_seed=None``).
Stage 3 (``decoder``, D_L): a decoding head phi(a | z) fitted by cross-entropy on
    z = pi~(s) of the labeled states, pi~ frozen. The policy is phi o pi~.

Steps: 50k / 60k / 10k of the paper's 120k, i.e. these shares of the run's total steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from ssilbench.api import EnvSpec, Method, Policy, RunContext, Stage, stream_seed
from ssilbench.kit import (
    TransitionFrames,
    fit_regressor,
    label_rows,
)
from ssilbench_lapo.world_model import (
    WorldModelConfig,
    decoder_net,
    fit_decoder,
    impala_net,
    latents_of,
    stage_one,
)


class LAPOConfig(WorldModelConfig):
    """LAPO's settings: stage 1's (inherited, shared with lapo_plus) and the step split."""

    latent_policy_fraction: float = Field(
        0.5, gt=0, lt=1, description="Share of the steps for stage 2 (paper: 60k of 120k)."
    )
    latent_policy_seed: int | None = Field(
        0,
        description="Seed of stage 2 (not the run's: one latent policy per game serves every "
        "seed, as the paper's runs trained it once, under seed 11); None: one per run seed.",
    )


@contextmanager
def evaluating(*nets: nn.Module) -> Iterator[None]:
    """Nets in eval mode for the block, back to their previous mode after it."""
    modes = [net.training for net in nets]
    for net in nets:
        net.eval()
    try:
        yield
    finally:
        for net, mode in zip(nets, modes, strict=True):
            net.train(mode)


class LatentActionPolicy(Policy):
    """pi(a | s) = phi(a | pi~(s)): the decoding head over the frozen latent policy."""

    def __init__(self, latent_policy: torch.nn.Module, decoder: torch.nn.Module) -> None:
        self.latent_policy = latent_policy
        self.decoder = decoder

    @torch.no_grad()
    def probs(self, obs: torch.Tensor) -> torch.Tensor:
        with evaluating(self.latent_policy):
            return F.softmax(self.decoder(self.latent_policy(obs)), dim=-1)


class LAPO(Method):
    description = "Latent IDM + forward model on D_U, latent BC on D_U, decoding head on D_L."
    Config = LAPOConfig

    def stages(self, cfg: LAPOConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        world, latent, decode = cfg.split_steps(total_steps, cfg.latent_policy_fraction)
        # pi~ reads D_U and the shared stage 1 only: one serves every budget, and every seed
        # too unless it is trained under the run's seed.
        share = f"lapo_latent_policy:{cfg.digest(LAPOConfig)}:{total_steps}"
        per: tuple[Literal["seed"], ...] = ("seed",) if cfg.latent_policy_seed is None else ()
        return [
            world,
            Stage("latent_policy", latent, data="unlabeled", share=share, per=per),
            Stage("decoder", decode, policy=True, data="labeled"),
        ]

    def fit(self, ctx: RunContext) -> LatentActionPolicy:
        cfg: LAPOConfig = ctx.config
        spec, device = ctx.spec, ctx.device
        speed, unlabeled, world = stage_one(ctx)

        # Stage 2: pi~ regresses onto the frozen latent IDM's latents of D_U (computed once
        # per world model, whichever run needs them first).
        targets = latents_of(ctx, world, unlabeled, speed)
        shared = cfg.latent_policy_seed
        if shared is None:  # pi~ and phi start from the run seed, one after the other
            with ctx.seeded():
                latent_policy = speed.module(impala_net(cfg, spec.obs_shape, cfg.latent_dim))
                decoder = decoder_net(cfg, spec.num_actions)
        else:  # pi~ the same for every seed (so the stage cache meets it again); phi the run's
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(shared)
                latent_policy = speed.module(impala_net(cfg, spec.obs_shape, cfg.latent_dim))
            with ctx.seeded():
                decoder = decoder_net(cfg, spec.num_actions)
        batches = ctx.stream_seed("latent_policy") if shared is None else stream_seed(
            shared, "latent_policy")  # fmt: skip
        latent_policy.to(device)
        fit_regressor(
            latent_policy, unlabeled.inputs("obs"), targets, ctx.plan.stage("latent_policy"),
            lr=cfg.lr, batch_size=cfg.batch_size, seed=batches, rule=ctx.stopping,
            schedule=cfg.later_schedule, speed=speed,
        )  # fmt: skip
        latent_policy.eval().requires_grad_(False)

        # Stage 3: phi on the frozen pi~'s latents of the labeled states.
        labeled = TransitionFrames(ctx.labeled, device)
        latents = label_rows(ctx.plan.cache, latent_policy, labeled.inputs("obs"), device,
                             speed, probs=False)  # fmt: skip
        policy = LatentActionPolicy(latent_policy, decoder.to(device))
        fit_decoder(ctx, decoder, latents, "decoder", policy)
        return policy
