"""Behaviour cloning: a policy pi(a | s) fitted by cross-entropy on the labeled D_L only.

The reference point of every SSIL comparison: it never looks at D_U.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import ArchitectureName, ArchOptions, EnvSpec, Method, RunContext, Stage
from ssilbench.kit import (
    ClassifierPolicy,
    TransitionFrames,
    build_net,
    fit_classifier,
    fit_classifiers,
    labeled_actions,
    speed_of,
    unified,
)


class BCConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arch: ArchitectureName = Field(None, description="Policy network; None = environment default.")
    lr: float | None = Field(None, gt=0, description="Adam learning rate; None = architecture's.")
    batch_size: int | None = Field(
        None, ge=1, description="Minibatch size; None = architecture's rule for |D_L|."
    )
    use_goal: bool = Field(
        True, description="False: leave the goal features out of the input (BC rather than BC_G)."
    )
    arch_options: ArchOptions = Field(
        default_factory=dict, description="Settings of a unified architecture (e.g. UVA's)."
    )


class BC(Method):
    description = "Behaviour cloning on D_L."
    Config = BCConfig
    batched = True

    def stages(self, cfg: BCConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        return [Stage("policy", total_steps, policy=True, data="labeled")]

    def _policy(self, ctx: RunContext) -> ClassifierPolicy:
        cfg: BCConfig = ctx.config
        arch = ctx.architecture(cfg.arch)
        with ctx.seeded():
            net = build_net(arch, ctx.spec, ctx.spec.num_actions, use_goal=cfg.use_goal)
        return ClassifierPolicy(speed_of(arch, ctx.device).module(net.to(ctx.device)))

    def fit(self, ctx: RunContext) -> ClassifierPolicy:
        cfg: BCConfig = ctx.config
        arch = ctx.architecture(cfg.arch)
        if arch.unified:  # one network (e.g. UVA) trained in its policy role
            model = unified(ctx, cfg.arch, cfg.arch_options)
            policy = model.policy("policy")
            model.train(["policy"], ctx.labeled, ctx.plan.stage("policy", policy=policy),
                        seed=ctx.stream_seed("policy"), rule=ctx.stopping)  # fmt: skip
            return policy
        s = TransitionFrames(ctx.labeled, ctx.device).inputs("obs")
        policy = self._policy(ctx)
        fit_classifier(
            policy.net, s, labeled_actions(ctx.labeled, ctx.device),
            ctx.plan.stage("policy", policy=policy),
            lr=cfg.lr or arch.lr,
            batch_size=cfg.batch_size or arch.batch_size(len(s)),
            seed=ctx.stream_seed("policy"),
            rule=ctx.stopping,
            schedule=arch.lr_schedule,
            speed=speed_of(arch, ctx.device),
        )  # fmt: skip
        return policy

    def fit_many(self, ctxs: list[RunContext]) -> list[ClassifierPolicy]:
        # The same computation as `fit` for every run, stacked into one.
        cfg: BCConfig = ctxs[0].config
        arch = ctxs[0].architecture(cfg.arch)
        if arch.unified:
            return [self.fit(ctx) for ctx in ctxs]
        states = [TransitionFrames(ctx.labeled, ctx.device).inputs("obs") for ctx in ctxs]
        policies = [self._policy(ctx) for ctx in ctxs]
        fit_classifiers(
            [p.net for p in policies],
            states,
            [labeled_actions(ctx.labeled, ctx.device) for ctx in ctxs],
            [ctx.plan.stage("policy", policy=p) for ctx, p in zip(ctxs, policies, strict=True)],
            lr=cfg.lr or arch.lr,
            batch_sizes=[cfg.batch_size or arch.batch_size(len(s)) for s in states],
            seeds=[ctx.stream_seed("policy") for ctx in ctxs],
            rule=ctxs[0].stopping,
            schedule=arch.lr_schedule,
            speed=speed_of(arch, ctxs[0].device),
        )
        return policies
