"""``ring_idm``: IDM labeling, with the labels of D_U kept in ``ctx.extras`` between the
stages and the policy cloned from a random half of D_U (drawn with ``ctx.generator``)."""

from __future__ import annotations

import torch
from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import ArchitectureName, Method, RunContext, Stage
from ssilbench.data.tensors import pair, pair_shape
from ssilbench.train.supervised import (
    ClassifierPolicy,
    fit_classifier,
    labeled_tensors,
    unlabeled_tensors,
)


class RingIDMConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arch: ArchitectureName = Field(None, description="Networks; None = environment default.")
    idm_share: float = Field(0.5, gt=0, lt=1, description="Share of the steps for the IDM.")


class RingIDM(Method):
    description = "IDM labeling with the labels kept in ctx.extras."
    Config = RingIDMConfig

    def stages(self, cfg, total_steps, spec, has_video_model):
        idm = int(total_steps * cfg.idm_share)
        return [
            Stage("idm", idm, data="labeled"),
            Stage("policy", total_steps - idm, policy=True, data="unlabeled"),
        ]

    def fit(self, ctx: RunContext) -> ClassifierPolicy:
        arch = ctx.architecture(ctx.config.arch)
        spec = ctx.spec

        s, a, s_next = labeled_tensors(ctx.labeled, ctx.device)
        idm = arch.build(pair_shape(spec.obs_shape), spec.num_actions).to(ctx.device)
        fit_classifier(
            idm,
            pair(s, s_next),
            a,
            ctx.plan.stage("idm"),
            lr=arch.lr,
            batch_size=arch.batch_size(len(s)),
            seed=ctx.seed,
        )
        u, u_next = unlabeled_tensors(ctx.unlabeled, ctx.device)
        with torch.no_grad():
            ctx.extras["labels"] = idm(pair(u, u_next)).argmax(dim=-1)

        keep = torch.randperm(len(u), generator=ctx.generator(1))[: max(1, len(u) // 2)]
        net = arch.build(spec.obs_shape, spec.num_actions).to(ctx.device)
        policy = ClassifierPolicy(net)
        fit_classifier(
            net,
            u[keep],
            ctx.extras["labels"][keep],
            ctx.plan.stage("policy", policy=policy),
            lr=arch.lr,
            batch_size=arch.batch_size(len(keep)),
            seed=ctx.seed,
        )
        return policy
