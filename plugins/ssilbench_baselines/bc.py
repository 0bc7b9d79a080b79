"""Behaviour cloning: a policy pi(a | s) fitted by cross-entropy on the labeled D_L only.

The reference point of every SSIL comparison: it never looks at D_U.
"""

from __future__ import annotations

from pydantic import Field

from ssilbench.api import ArchitectureName, EnvSpec, Policy, Stage, omitted_at_default
from ssilbench_baselines import common
from ssilbench_baselines.config import (
    REFERENCE_WARMUP_STEPS,
    LearningRate,
    MethodConfig,
    StageBatchSize,
    Standardisation,
    UnifiedOptions,
    WarmupSteps,
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
    warmup_steps: WarmupSteps = REFERENCE_WARMUP_STEPS

    # warmup_steps came after runs were recorded and applies only to architectures with a
    # warm-up (impala's): at its default, the runs of the others keep their run ids.
    _serialise = omitted_at_default("warmup_steps")


class BC(common.BaselineMethod):
    description = "Behaviour cloning on D_L."
    Config = BCConfig

    def stages(self, cfg: BCConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        return [Stage("policy", total_steps, policy=True, data="labeled")]

    def fit_group(self, runs: common.Runs) -> list[Policy]:
        """A policy per run, fitted on D_L (a unified model trained in its policy role)."""
        [nets] = runs.models("policy")
        policies = runs.policies(nets)
        runs.fit(nets, "policy", "labeled", policies=policies)
        return policies
