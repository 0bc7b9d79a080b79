"""Behaviour cloning: a policy pi(a | s) fitted by cross-entropy on the labeled D_L only.

The reference point of every SSIL comparison: it never looks at D_U.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import ArchitectureName, EnvSpec, Method, RunContext, Stage
from ssilbench.train.supervised import ClassifierPolicy, fit_classifier, labeled_tensors


class BCConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arch: ArchitectureName = Field(None, description="Policy network; None = environment default.")
    lr: float | None = Field(None, gt=0, description="Adam learning rate; None = architecture's.")
    batch_size: int | None = Field(
        None, ge=1, description="Minibatch size; None = architecture's rule for |D_L|."
    )


class BC(Method):
    description = "Behaviour cloning on D_L."
    Config = BCConfig

    def stages(self, cfg: BCConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        return [Stage("policy", total_steps, policy=True, data="labeled")]

    def fit(self, ctx: RunContext) -> ClassifierPolicy:
        cfg: BCConfig = ctx.config
        arch = ctx.architecture(cfg.arch)
        s, a, _ = labeled_tensors(ctx.labeled, ctx.device)

        net = arch.build(ctx.spec.obs_shape, ctx.spec.num_actions).to(ctx.device)
        policy = ClassifierPolicy(net)
        fit_classifier(
            net,
            s,
            a,
            ctx.plan.stage("policy", policy=policy),
            lr=cfg.lr or arch.lr,
            batch_size=cfg.batch_size or arch.batch_size(len(s)),
            seed=ctx.seed,
        )
        return policy
