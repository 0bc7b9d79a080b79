"""Behaviour cloning: a policy pi(a | s) fitted by cross-entropy on the labeled D_L only.

The reference point of every SSIL comparison: it never looks at D_U.
"""

from __future__ import annotations

from pydantic import Field

from ssilbench.api import Architecture, ArchitectureName, EnvSpec, RunContext, Stage
from ssilbench.kit import (
    ClassifierPolicy,
    TransitionFrames,
    build_net,
    labeled_actions,
    speed_of,
    unified,
)
from ssilbench_baselines.common import (
    BaselineMethod,
    LearningRate,
    MethodConfig,
    UnifiedOptions,
    fit_stage,
    fit_stages,
    train_role,
)


class BCConfig(MethodConfig):
    arch: ArchitectureName = Field(None, description="Policy network; None = environment default.")
    lr: LearningRate = None
    batch_size: int | None = Field(
        None, ge=1, description="Minibatch size; None = architecture's rule for |D_L|."
    )
    use_goal: bool = Field(
        True, description="False: leave the goal features out of the input (BC rather than BC_G)."
    )
    arch_options: UnifiedOptions


class BC(BaselineMethod):
    description = "Behaviour cloning on D_L."
    Config = BCConfig

    def stages(self, cfg: BCConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        return [Stage("policy", total_steps, policy=True, data="labeled")]

    def _policy(self, ctx: RunContext) -> ClassifierPolicy:
        cfg: BCConfig = ctx.config
        arch = ctx.architecture(cfg.arch)
        with ctx.seeded():
            net = build_net(arch, ctx.spec, ctx.spec.num_actions, use_goal=cfg.use_goal)
        return ClassifierPolicy(speed_of(arch, ctx.device).module(net.to(ctx.device)))

    def _fit_unified(self, ctx: RunContext):
        """One network (e.g. UVA) trained in its policy role."""
        cfg: BCConfig = ctx.config
        model = unified(ctx, cfg.arch, cfg.arch_options)
        policy = model.policy("policy")
        train_role(ctx, model, "policy", ctx.labeled, "policy", policy)
        return policy

    def _fit_networks(self, ctx: RunContext, arch: Architecture) -> ClassifierPolicy:
        s = TransitionFrames(ctx.labeled, ctx.device).inputs("obs")
        policy = self._policy(ctx)
        actions = labeled_actions(ctx.labeled, ctx.device)
        fit_stage(ctx, arch, policy.net, s, actions, "policy", policy)
        return policy

    def _fit_stacked(self, ctxs: list[RunContext], arch: Architecture) -> list[ClassifierPolicy]:
        states = [TransitionFrames(ctx.labeled, ctx.device).inputs("obs") for ctx in ctxs]
        policies = [self._policy(ctx) for ctx in ctxs]
        actions = [labeled_actions(ctx.labeled, ctx.device) for ctx in ctxs]
        fit_stages(ctxs, arch, [p.net for p in policies], states, actions, "policy", policies)
        return policies
