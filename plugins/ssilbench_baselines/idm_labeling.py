"""IDM labeling (VPT-style): fit an IDM h(a | s, s') on D_L, label D_U with it, clone a policy.

Stage 1 fits the IDM on the labeled transitions. Stage 2 freezes it and fits pi(a | s) on
every unlabeled transition by minimising -E_{h(a|s,s')} log pi(a | s): the paper's objective
with soft labels (the default), or cross-entropy to argmax h (``labels="hard"``, as the
paper's Procgen code did).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import ArchitectureName, ArchOptions, EnvSpec, Method, RunContext, Stage
from ssilbench.kit import (
    ArgmaxRows,
    ClassifierPolicy,
    FrameInputs,
    RowSource,
    TransitionFrames,
    build_net,
    fit_classifier,
    fit_classifiers,
    label_rows,
    labeled_actions,
    speed_of,
    unified,
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
    use_goal: bool = Field(
        True, description="False: leave the goal features out of the IDM's and the policy's inputs."
    )
    arch_options: ArchOptions = Field(
        default_factory=dict, description="Settings of a unified architecture (e.g. UVA's)."
    )


class IDMLabeling(Method):
    description = "IDM on D_L labels D_U; a policy is cloned from the labeled D_U."
    Config = IDMLabelingConfig
    batched = True

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
        idm.train(
            ["idm"],
            ctx.labeled,
            ctx.plan.stage("idm"),
            seed=ctx.stream_seed("idm"),
            rule=ctx.stopping,
        )
        labels = idm.label(ctx.unlabeled)
        student = idm.fresh()
        policy = student.policy("policy")
        student.train(["policy"], ctx.unlabeled, ctx.plan.stage("policy", policy=policy),
                      seed=ctx.stream_seed("policy"), labels=labels, rule=ctx.stopping)  # fmt: skip
        return policy

    def fit(self, ctx: RunContext) -> ClassifierPolicy:
        cfg: IDMLabelingConfig = ctx.config
        arch = ctx.architecture(cfg.arch)
        if arch.unified:
            return self._fit_unified(ctx)
        lr, speed = cfg.lr or arch.lr, speed_of(arch, ctx.device)
        policy = self._networks(ctx)

        # Stage 1: the IDM sees (s, s') stacked and predicts the action.
        pairs = TransitionFrames(ctx.labeled, ctx.device).inputs("pair")
        fit_classifier(
            policy.idm, pairs, labeled_actions(ctx.labeled, ctx.device), ctx.plan.stage("idm"),
            lr=lr, batch_size=cfg.batch_size or arch.batch_size(len(pairs)),
            seed=ctx.stream_seed("idm"), rule=ctx.stopping, schedule=arch.lr_schedule,
            speed=speed,
        )  # fmt: skip

        # Stage 2: label every unlabeled transition with the frozen IDM, then clone.
        u, labels = self._labels(ctx, policy)
        fit_classifier(
            policy.net, u, labels, ctx.plan.stage("policy", policy=policy),
            lr=lr, batch_size=cfg.batch_size or arch.batch_size(len(u)),
            seed=ctx.stream_seed("policy"), rule=ctx.stopping, schedule=arch.lr_schedule,
            speed=speed,
        )  # fmt: skip
        return policy

    def fit_many(self, ctxs: list[RunContext]) -> list[ClassifierPolicy]:
        # `fit` for every run, each stage stacked into one computation.
        cfg: IDMLabelingConfig = ctxs[0].config
        arch = ctxs[0].architecture(cfg.arch)
        if arch.unified:
            return [self._fit_unified(ctx) for ctx in ctxs]
        lr = cfg.lr or arch.lr
        policies = [self._networks(ctx) for ctx in ctxs]
        pairs = list(zip(ctxs, policies, strict=True))

        speed = speed_of(arch, ctxs[0].device)
        idm_inputs = [TransitionFrames(ctx.labeled, ctx.device).inputs("pair") for ctx in ctxs]
        fit_classifiers(
            [p.idm for p in policies],
            idm_inputs,
            [labeled_actions(ctx.labeled, ctx.device) for ctx in ctxs],
            [ctx.plan.stage("idm") for ctx in ctxs],
            lr=lr,
            batch_sizes=[cfg.batch_size or arch.batch_size(len(x)) for x in idm_inputs],
            seeds=[ctx.stream_seed("idm") for ctx in ctxs],
            rule=ctxs[0].stopping,
            schedule=arch.lr_schedule,
            speed=speed,
        )

        labeled_u = [self._labels(ctx, p) for ctx, p in pairs]
        fit_classifiers(
            [p.net for p in policies],
            [u for u, _ in labeled_u],
            [labels for _, labels in labeled_u],
            [ctx.plan.stage("policy", policy=p) for ctx, p in pairs],
            lr=lr,
            batch_sizes=[cfg.batch_size or arch.batch_size(len(u)) for u, _ in labeled_u],
            seeds=[ctx.stream_seed("policy") for ctx in ctxs],
            rule=ctxs[0].stopping,
            schedule=arch.lr_schedule,
            speed=speed,
        )
        return policies
