"""IDM labeling (VPT-style): fit an IDM h(a | s, s') on D_L, label D_U with it, clone a policy.

Stage 1 fits the IDM on the labeled transitions. Stage 2 freezes it and fits pi(a | s) on
every unlabeled transition by minimising -E_{h(a|s,s')} log pi(a | s): the paper's objective
with soft labels (the default), or cross-entropy to argmax h (``labels="hard"``, as the
paper's Procgen code did).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import ArchitectureName, EnvSpec, Method, RunContext, Stage
from ssilbench.data.tensors import pair, pair_shape
from ssilbench.train.supervised import (
    ClassifierPolicy,
    fit_classifier,
    labeled_tensors,
    predict_probs,
    unlabeled_tensors,
)


class IDMLabelingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arch: ArchitectureName = Field(
        None, description="Network of both the IDM and the policy; None = environment default."
    )
    labels: Literal["soft", "hard"] = Field(
        "soft", description="soft: expectation under the IDM (paper); hard: its argmax."
    )
    idm_fraction: float = Field(
        0.5, gt=0, lt=1, description="Share of the step budget for the IDM stage (paper: 1/2)."
    )
    lr: float | None = Field(None, gt=0, description="Adam learning rate; None = architecture's.")
    batch_size: int | None = Field(
        None, ge=1, description="Minibatch size; None = architecture's rule for each stage's data."
    )


class IDMLabeling(Method):
    description = "IDM on D_L labels D_U; a policy is cloned from the labeled D_U."
    Config = IDMLabelingConfig

    def stages(
        self, cfg: IDMLabelingConfig, total_steps: int, spec: EnvSpec, has_video_model: bool
    ):
        idm_steps = round(total_steps * cfg.idm_fraction)
        return [
            Stage("idm", idm_steps, data="labeled"),
            Stage("policy", total_steps - idm_steps, policy=True, data="unlabeled"),
        ]

    def fit(self, ctx: RunContext) -> ClassifierPolicy:
        cfg: IDMLabelingConfig = ctx.config
        arch = ctx.architecture(cfg.arch)
        spec = ctx.spec
        lr = cfg.lr or arch.lr

        # Stage 1: the IDM sees (s, s') stacked and predicts the action.
        s, a, s_next = labeled_tensors(ctx.labeled, ctx.device)
        idm = arch.build(pair_shape(spec.obs_shape), spec.num_actions).to(ctx.device)
        fit_classifier(
            idm,
            pair(s, s_next),
            a,
            ctx.plan.stage("idm"),
            lr=lr,
            batch_size=cfg.batch_size or arch.batch_size(len(s)),
            seed=ctx.seed,
        )

        # Stage 2: label every unlabeled transition with the frozen IDM, then clone.
        u, u_next = unlabeled_tensors(ctx.unlabeled, ctx.device)
        labels = predict_probs(idm.eval(), pair(u, u_next))
        if cfg.labels == "hard":
            labels = labels.argmax(dim=-1)
        net = arch.build(spec.obs_shape, spec.num_actions).to(ctx.device)
        policy = ClassifierPolicy(net)
        fit_classifier(
            net,
            u,
            labels,
            ctx.plan.stage("policy", policy=policy),
            lr=lr,
            batch_size=cfg.batch_size or arch.batch_size(len(u)),
            seed=ctx.seed + 1,
        )
        return policy
