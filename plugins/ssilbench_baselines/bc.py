"""Behaviour cloning: a policy pi(a | s) fitted by cross-entropy on the labeled D_L only.

The reference point of every SSIL comparison: it never looks at D_U.
"""

from __future__ import annotations

from pydantic import Field

from ssilbench.api import Architecture, ArchitectureName, EnvSpec, RunContext, Stage
from ssilbench.kit import ClassifierPolicy, unified
from ssilbench_baselines import common
from ssilbench_baselines.config import (
    LearningRate,
    MethodConfig,
    StageBatchSize,
    Standardisation,
    UnifiedOptions,
)


class BCConfig(MethodConfig):
    arch: ArchitectureName = Field(None, description="Policy network; None = environment default.")
    lr: LearningRate = None
    batch_size: StageBatchSize = None
    standardise: Standardisation = "none"
    use_goal: bool = Field(
        True, description="False: leave the goal features out of the input (BC rather than BC_G)."
    )
    arch_options: UnifiedOptions


class BC(common.BaselineMethod):
    description = "Behaviour cloning on D_L."
    Config = BCConfig

    def stages(self, cfg: BCConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        return [Stage("policy", total_steps, policy=True, data="labeled")]

    def _policy(self, ctx: RunContext, arch: Architecture) -> ClassifierPolicy:
        [net] = common.networks(ctx, arch, "obs")
        return ClassifierPolicy(net)

    def _fit_unified(self, ctx: RunContext):
        """One network (e.g. UVA) trained in its policy role."""
        cfg: BCConfig = ctx.config
        model = unified(ctx, cfg.arch, cfg.arch_options)
        policy = model.policy("policy")
        common.train_role(ctx, model, "policy", ctx.labeled, "policy", policy)
        return policy

    def _fit_networks(self, ctx: RunContext, arch: Architecture) -> ClassifierPolicy:
        policy = self._policy(ctx, arch)
        common.fit_labeled(ctx, arch, policy.net, "obs", "policy", policy)
        return policy

    def _fit_stacked(self, ctxs: list[RunContext], arch: Architecture) -> list[ClassifierPolicy]:
        policies = [self._policy(ctx, arch) for ctx in ctxs]
        common.fit_labeled_stacked(ctxs, arch, [p.net for p in policies], "obs", "policy", policies)
        return policies
