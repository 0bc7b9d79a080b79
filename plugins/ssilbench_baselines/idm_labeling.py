"""IDM labeling (VPT-style): fit an IDM h(a | s, s') on D_L, label D_U with it, clone a policy.

Stage 1 fits the IDM on the labeled transitions. Stage 2 freezes it and fits pi(a | s) on
every unlabeled transition by minimising -E_{h(a|s,s')} log pi(a | s): the paper's objective
with soft labels (the default), or cross-entropy to argmax h (``labels="hard"``, as the
paper's Procgen code did).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ssilbench.api import Architecture, ArchitectureName, EnvSpec, RunContext, Stage
from ssilbench.kit import (
    ArgmaxRows,
    ClassifierPolicy,
    FrameInputs,
    RowSource,
    TransitionFrames,
    build_net,
    label_rows,
    labeled_actions,
    speed_of,
    unified,
)
from ssilbench_baselines.common import (
    BaselineMethod,
    LearningRate,
    MethodConfig,
    StageBatchSize,
    UnifiedOptions,
    fit_stage,
    fit_stages,
    train_role,
)


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
    use_goal: bool = Field(
        True, description="False: leave the goal features out of the IDM's and the policy's inputs."
    )
    arch_options: UnifiedOptions


class IDMLabeling(BaselineMethod):
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

    def _networks(self, ctx: RunContext) -> ClassifierPolicy:
        """The policy network with its (untrained) IDM, both seeded from the run."""
        cfg: IDMLabelingConfig = ctx.config
        arch, spec = ctx.architecture(cfg.arch), ctx.spec
        with ctx.seeded():
            idm = build_net(arch, spec, spec.num_actions, paired=True, use_goal=cfg.use_goal)
            net = build_net(arch, spec, spec.num_actions, use_goal=cfg.use_goal)
        speed = speed_of(arch, ctx.device)
        return ClassifierPolicy(speed.module(net.to(ctx.device)),
                                idm=speed.module(idm.to(ctx.device)))  # fmt: skip

    def _labels(self, ctx: RunContext, policy: ClassifierPolicy) -> tuple[FrameInputs, RowSource]:
        """D_U's states and their labels from the frozen IDM (soft or hard), labelled once
        per IDM and kept in the stage cache."""
        unlabeled = TransitionFrames(ctx.unlabeled, ctx.device)
        speed = speed_of(ctx.architecture(ctx.config.arch), ctx.device)
        probs = label_rows(ctx.plan.cache, policy.idm.eval(), unlabeled.inputs("pair"),
                           ctx.device, speed)  # fmt: skip
        return unlabeled.inputs("obs"), ArgmaxRows(probs) if ctx.config.labels == "hard" else probs

    def _fit_unified(self, ctx: RunContext):
        """The same two stages with one network (e.g. UVA): trained as an IDM, it labels
        D_U; a second copy from the same initialisation is trained as the policy."""
        cfg: IDMLabelingConfig = ctx.config
        idm = unified(ctx, cfg.arch, cfg.arch_options)
        train_role(ctx, idm, "idm", ctx.labeled, "idm")
        labels = idm.label(ctx.unlabeled)
        student = idm.fresh()
        policy = student.policy("policy")
        train_role(ctx, student, "policy", ctx.unlabeled, "policy", policy, labels)
        return policy

    def _fit_networks(self, ctx: RunContext, arch: Architecture) -> ClassifierPolicy:
        policy = self._networks(ctx)

        # Stage 1: the IDM sees (s, s') stacked and predicts the action.
        pairs = TransitionFrames(ctx.labeled, ctx.device).inputs("pair")
        fit_stage(ctx, arch, policy.idm, pairs, labeled_actions(ctx.labeled, ctx.device), "idm")

        # Stage 2: label every unlabeled transition with the frozen IDM, then clone.
        u, labels = self._labels(ctx, policy)
        fit_stage(ctx, arch, policy.net, u, labels, "policy", policy)
        return policy

    def _fit_stacked(self, ctxs: list[RunContext], arch: Architecture) -> list[ClassifierPolicy]:
        policies = [self._networks(ctx) for ctx in ctxs]
        idm_inputs = [TransitionFrames(ctx.labeled, ctx.device).inputs("pair") for ctx in ctxs]
        actions = [labeled_actions(ctx.labeled, ctx.device) for ctx in ctxs]
        fit_stages(ctxs, arch, [p.idm for p in policies], idm_inputs, actions, "idm")

        labeled_u = [self._labels(ctx, p) for ctx, p in zip(ctxs, policies, strict=True)]
        states, labels = [u for u, _ in labeled_u], [y for _, y in labeled_u]
        fit_stages(ctxs, arch, [p.net for p in policies], states, labels, "policy", policies)
        return policies
