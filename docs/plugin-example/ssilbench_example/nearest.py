"""Nearest-neighbour IDM labeling: an inverse dynamics model that needs no training.

Every unlabeled transition (s, s') takes the action of the labeled transition (s_L, a_L,
s'_L) closest to it, then a policy pi(a | s) is cloned from all of D_U with those labels,
exactly as ``idm_labeling`` does with a trained IDM. Labeling spends no optimiser steps, so
at step parity with the other methods the whole budget goes to the policy.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import ArchitectureName, EnvSpec, Method, RunContext, Stage
from ssilbench.kit import (
    ClassifierPolicy,
    fit_classifier,
    labeled_tensors,
    pair,
    unlabeled_tensors,
)


class NearestIDMConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arch: ArchitectureName = Field(None, description="Policy network; None = environment default.")
    features: Literal["pair", "delta"] = Field(
        "pair",
        description="What the distance compares: 'pair' = (s, s') stacked; 'delta' = s' - s "
        "(enough where an action's effect does not depend on the state).",
    )
    lr: float | None = Field(None, gt=0, description="Adam learning rate; None = architecture's.")
    batch_size: int | None = Field(
        None, ge=1, description="Minibatch size; None = architecture's rule for |D_U|."
    )


def features(obs: torch.Tensor, next_obs: torch.Tensor, kind: str) -> torch.Tensor:
    """One flat feature vector per transition."""
    if kind == "delta":
        return (next_obs - obs).flatten(1)
    return pair(obs, next_obs).flatten(1)


@torch.no_grad()
def nearest(queries: torch.Tensor, keys: torch.Tensor, chunk: int = 1024) -> torch.Tensor:
    """Index of the closest key (Euclidean) for every query; a tie goes to the lowest index."""
    return torch.cat(
        [
            torch.cdist(queries[i : i + chunk], keys).argmin(dim=1)
            for i in range(0, len(queries), chunk)
        ]
    )


class NearestIDM(Method):
    description = "Each D_U transition takes the action of its nearest D_L transition; then BC."
    Config = NearestIDMConfig

    def stages(self, cfg: NearestIDMConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        return [
            Stage("label", 0, data="both"),
            Stage("policy", total_steps, policy=True, data="unlabeled"),
        ]

    def fit(self, ctx: RunContext) -> ClassifierPolicy:
        cfg: NearestIDMConfig = ctx.config
        arch = ctx.architecture(cfg.arch)
        spec = ctx.spec

        # Stage 1: copy each unlabeled transition's label from its nearest labeled one.
        ctx.plan.stage("label")  # declared with 0 steps: a lookup, nothing to optimise
        s, a, s_next = labeled_tensors(ctx.labeled, ctx.device)
        u, u_next = unlabeled_tensors(ctx.unlabeled, ctx.device)
        closest = nearest(features(u, u_next, cfg.features), features(s, s_next, cfg.features))
        labels = a[closest]

        # Stage 2: clone a policy from every unlabeled state with its copied label. The
        # network is built from the run seed, whatever was built before it.
        with ctx.seeded():
            net = arch.build(spec.obs_shape, spec.num_actions).to(ctx.device)
        policy = ClassifierPolicy(net)
        fit_classifier(
            net,
            u,
            labels,
            ctx.plan.stage("policy", policy=policy),
            lr=cfg.lr or arch.lr,
            batch_size=cfg.batch_size or arch.batch_size(len(u)),
            seed=ctx.stream_seed("policy"),
            rule=ctx.stopping,  # --stop-early's rule, the same for every method
        )
        return policy
