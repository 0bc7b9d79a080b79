"""IDM labeling (VPT-style): fit an IDM h(a | s, s') on D_L, label D_U with it, clone a policy.

Stage 1 fits the IDM on the labeled transitions. Stage 2 freezes it and fits pi(a | s) on
every unlabeled transition by minimising -E_{h(a|s,s')} log pi(a | s): the paper's objective
with soft labels (the default), or cross-entropy to argmax h (``labels="hard"``, as the
paper's Procgen code did).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from ssilbench.api import Architecture, ArchitectureName, EnvSpec, RunContext, Stage
from ssilbench.kit import (
    ArgmaxRows,
    ClassifierPolicy,
    FrameInputs,
    RowSource,
    TransitionFrames,
    label_rows,
    speed_of,
    unified,
)
from ssilbench_baselines import common
from ssilbench_baselines.config import (
    LearningRate,
    MethodConfig,
    StageBatchSize,
    Standardisation,
    UnifiedOptions,
)

CONFIDENT = 0.9
SAMPLED_ROWS = 65_536


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
        "soft", description="soft: expectation under the IDM (paper); hard: its argmax."
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

    def _networks(self, ctx: RunContext, arch: Architecture) -> ClassifierPolicy:
        """The policy network with its (untrained) IDM, both seeded from the run."""
        idm, net = common.networks(ctx, arch, "pair", "obs")
        return ClassifierPolicy(net, idm=idm)

    def _labels(self, ctx: RunContext, policy: ClassifierPolicy) -> tuple[FrameInputs, RowSource]:
        """D_U's states and their labels from the frozen IDM (soft or hard), labelled once
        per IDM and kept in the stage cache."""
        unlabeled = TransitionFrames(ctx.unlabeled, ctx.device)
        speed = speed_of(ctx.architecture(ctx.config.arch), ctx.device)
        probs = label_rows(ctx.plan.cache, policy.idm.eval(), unlabeled.inputs("pair"),
                           ctx.device, speed)  # fmt: skip
        log_confidence(ctx, probs)
        return unlabeled.inputs("obs"), ArgmaxRows(probs) if ctx.config.labels == "hard" else probs

    def _fit_unified(self, ctx: RunContext):
        """The same two stages with one network (e.g. UVA): trained as an IDM, it labels
        D_U; a second copy from the same initialisation is trained as the policy."""
        cfg: IDMLabelingConfig = ctx.config
        idm = unified(ctx, cfg.arch, cfg.arch_options)
        common.train_role(ctx, idm, "idm", ctx.labeled, "idm")
        labels = idm.label(ctx.unlabeled)
        student = idm.fresh()
        policy = student.policy("policy")
        common.train_role(ctx, student, "policy", ctx.unlabeled, "policy", policy, labels)
        return policy

    def _fit_networks(self, ctx: RunContext, arch: Architecture) -> ClassifierPolicy:
        policy = self._networks(ctx, arch)

        # Stage 1: the IDM sees (s, s') stacked and predicts the action.
        common.fit_labeled(ctx, arch, policy.idm, "pair", "idm", batch=ctx.config.idm_batch_size)

        # Stage 2: label every unlabeled transition with the frozen IDM, then clone.
        u, labels = self._labels(ctx, policy)
        common.fit_stage(ctx, arch, policy.net, u, labels, "policy", policy)
        return policy

    def _fit_stacked(self, ctxs: list[RunContext], arch: Architecture) -> list[ClassifierPolicy]:
        policies = [self._networks(ctx, arch) for ctx in ctxs]
        idms = [p.idm for p in policies]
        common.fit_labeled_stacked(
            ctxs, arch, idms, "pair", "idm", batch=ctxs[0].config.idm_batch_size
        )

        labeled_u = [self._labels(ctx, p) for ctx, p in zip(ctxs, policies, strict=True)]
        states, labels = [u for u, _ in labeled_u], [y for _, y in labeled_u]
        common.fit_stages(ctxs, arch, [p.net for p in policies], states, labels, "policy", policies)
        return policies
