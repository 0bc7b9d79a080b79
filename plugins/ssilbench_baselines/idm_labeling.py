"""IDM labeling (VPT-style): fit an IDM h(a | s, s') on D_L, label D_U with it, clone a policy.

Stage 1 fits the IDM on the labeled transitions. Stage 2 freezes it and fits pi(a | s) on
every unlabeled transition by cross-entropy to argmax h (hard labels, the default, as the
paper's Procgen code labels), or by minimising -E_{h(a|s,s')} log pi(a | s) (``labels="soft"``,
the objective as the paper writes it).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ssilbench.api import ArchitectureName, EnvSpec, Policy, RunContext, Stage, omitted_at_default
from ssilbench.kit import ArgmaxRows, RowSource
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

CONFIDENT = 0.9
SAMPLED_ROWS = 65_536


def kept_labels(ctx: RunContext, probs: RowSource) -> RowSource:
    """The IDM's probabilities as the policy's targets, soft or hard (their argmax) as the
    config says; how sure the IDM is of them is recorded first."""
    log_confidence(ctx, probs)
    return ArgmaxRows(probs) if ctx.config.labels == "hard" else probs


def log_confidence(ctx: RunContext, probs: RowSource) -> None:
    """Record how sure the IDM is of its labels of D_U (``ctx.log_metric``): the mean top
    probability (``label_confidence``) and the fraction of labels whose top probability is at
    least 0.9 (``labels_confident``), over up to 65,536 evenly spaced rows. Reads the labels
    only: the run's result is the same."""
    n = len(probs)
    if n == 0:
        return
    rows = np.unique(np.linspace(0, n - 1, min(n, SAMPLED_ROWS)).astype(np.int64))
    top = probs[rows].float().max(dim=-1).values
    ctx.log_metric("label_confidence", float(top.mean()))
    ctx.log_metric("labels_confident", float((top >= CONFIDENT).float().mean()))


class IDMLabelingConfig(MethodConfig):
    arch: ArchitectureName = Field(
        None, description="Network of both the IDM and the policy; None = environment default."
    )
    labels: Literal["soft", "hard"] = Field(
        "hard",
        description="hard: the IDM's argmax (the paper's code); soft: the expectation under "
        "the IDM (the paper's text).",
    )
    idm_fraction: float = Field(
        0.5, gt=0, lt=1, description="Share of the step budget for the IDM stage (paper: 1/2)."
    )
    lr: LearningRate = None
    batch_size: StageBatchSize = None
    idm_batch_size: StageBatchSize = Field(
        None, description="The IDM stage's minibatch size; None = batch_size."
    )
    standardise: Standardisation = "none"
    use_goal: bool = Field(
        True, description="False: leave the goal features out of the IDM's and the policy's inputs."
    )
    arch_options: UnifiedOptions
    warmup_steps: WarmupSteps = REFERENCE_WARMUP_STEPS

    # warmup_steps came after runs were recorded and applies only to architectures with a
    # warm-up (impala's): at its default, the runs of the others keep their run ids.
    _serialise = omitted_at_default("warmup_steps")


class IDMLabeling(common.BaselineMethod):
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

    def fit_group(self, runs: common.Runs) -> list[Policy]:
        """Networks: an IDM and a policy network per run. A unified model (e.g. UVA) is
        trained as the IDM and labels D_U in its own terms (UVA: an action chunk per window,
        so ``labels`` does not apply); the policy is a second copy from its initialisation."""
        cfg: IDMLabelingConfig = runs.config
        idms, nets = runs.models("idm", "policy")

        # Stage 1: the IDM sees (s, s') stacked and predicts the action.
        runs.fit(idms, "idm", "labeled", batch=cfg.idm_batch_size)

        # Stage 2: label every unlabeled transition with the frozen IDM, then clone.
        labels = runs.label(idms)
        if not runs.unified:  # a classifier's labels are action probabilities
            labels = [kept_labels(ctx, probs) for ctx, probs in zip(runs.ctxs, labels, strict=True)]
        policies = runs.policies(nets, idms)
        runs.fit(nets, "policy", "unlabeled", labels, policies)
        return policies
