"""VM-IDM: pi(a | s) = h(a | s, v(s)), an IDM fitted on D_L applied to a video model's output.

With the environment's ground-truth video model v* (``video_model="auto"`` where the
environment has one, or ``"ground_truth"``) this is the paper's VM*-IDM and the whole step
budget goes to the IDM. Otherwise a deterministic video model is learned on D_U first
(s' = s + net(s), mean squared error), taking ``vm_fraction`` of the budget. A unified
architecture (UVA) is its own video model (``pairing``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from ssilbench.api import (
    ArchitectureName,
    ConfigError,
    EnvSpec,
    Policy,
    RunContext,
    Stage,
    VideoModel,
    omitted_at_default,
)
from ssilbench.kit import (
    RegressionVideoModel,
    RoleModel,
    TransitionFrames,
    fit_regressor,
    speed_of,
)
from ssilbench_baselines import common
from ssilbench_baselines.config import (
    REFERENCE_WARMUP_STEPS,
    LearningRate,
    MethodConfig,
    StageBatchSize,
    Standardisation,
    UnifiedOptions,
    WarmupSteps,
    warmed_up,
)

if TYPE_CHECKING:
    from torch import nn


class VMIDMConfig(MethodConfig):
    arch: ArchitectureName = Field(None, description="IDM network; None = environment default.")
    video_model: Literal["auto", "ground_truth", "learned"] = Field(
        "auto", description="auto: the environment's ground truth if it has one, else learned."
    )
    vm_arch: ArchitectureName = Field(
        None, description="Learned video model network; None = mlp5 (vectors) or cnn5 (images)."
    )
    vm_fraction: float = Field(
        0.5, gt=0, lt=1, description="Share of the step budget for learning the video model."
    )
    lr: LearningRate = None
    batch_size: StageBatchSize = None
    standardise: Standardisation = "none"
    use_goal: bool = Field(
        True,
        description="False: the IDM does not see the goal features "
        "(VM*_G-IDM rather than VM*_G-IDM_G).",
    )
    arch_options: UnifiedOptions
    warmup_steps: WarmupSteps = REFERENCE_WARMUP_STEPS
    pairing: Literal["initial", "finetuned"] = Field(
        "initial",
        description="Unified architectures (UVA) only. initial (the paper's): the IDM, trained "
        "on D_L from the shared initialisation (the one IDM labeling trains), is paired with "
        "the initial video model (the pretraining on D_U); finetuned: one network trained in "
        "video mode on D_U, then inverse mode on D_L, sampled as both.",
    )

    # pairing and warmup_steps came after runs were recorded; pairing changes nothing but
    # unified models' runs (whose plugin declares a new results revision), warmup_steps
    # applies only to architectures with a warm-up (impala's): at their defaults, the other
    # runs keep their run ids.
    _serialise = omitted_at_default("pairing", "warmup_steps")


def _unified(cfg: VMIDMConfig, spec: EnvSpec) -> bool:
    """Whether the run's IDM is a unified model (e.g. UVA), its own video model."""
    from ssilbench.kit import architecture

    return bool(architecture(cfg.arch or spec.default_arch).unified)


def _learned(cfg: VMIDMConfig, has_video_model: bool) -> bool:
    if cfg.video_model == "ground_truth" and not has_video_model:
        raise ConfigError(
            "vm_idm: video_model=ground_truth, but this environment has no ground-truth video "
            "model; use video_model=learned (or auto)."
        )
    return cfg.video_model == "learned" or (cfg.video_model == "auto" and not has_video_model)


class VMIDM(common.BaselineMethod):
    description = "IDM on D_L applied to a video model's next state (ground truth or learned)."
    Config = VMIDMConfig

    def stages(self, cfg: VMIDMConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        learned = _learned(cfg, has_video_model)
        if _unified(cfg, spec):
            if not learned:
                raise ConfigError(
                    "vm_idm: a unified architecture predicts its own future frames; use "
                    "video_model=learned (or auto) with it."
                )
            if cfg.pairing == "initial":
                # The paired video model is the shared initialisation: no stage of the run.
                return [Stage("idm", total_steps, policy=True, data="labeled")]
        elif not learned:  # the environment's v*
            return [Stage("idm", total_steps, policy=True, data="labeled")]
        vm_steps = round(total_steps * cfg.vm_fraction)
        # The learned video model reads D_U only: one per seed serves every label budget.
        share = f"vm_idm_video_model:{cfg.model_dump_json()}:{vm_steps}"
        return [
            Stage("video_model", vm_steps, data="unlabeled", share=share, per=("seed",)),
            Stage("idm", total_steps - vm_steps, policy=True, data="labeled"),
        ]

    def fit_group(self, runs: common.Runs) -> list[Policy]:
        [idms] = runs.models("idm")
        videos = [self._video_model(ctx, idm, runs.unified)
                  for ctx, idm in zip(runs.ctxs, idms, strict=True)]  # fmt: skip
        policies = runs.vm_idm_policies(idms, videos)
        runs.fit(idms, "idm", "labeled", policies=policies)
        return policies

    def _video_model(
        self, ctx: RunContext, idm: nn.Module | RoleModel, unified: bool
    ) -> VideoModel | RoleModel | None:
        """The video model whose next state the run's IDM reads. Networks: the environment's
        v*, or one learned on D_U. A unified model (e.g. UVA): with ``pairing=initial`` (the
        paper's), a copy of its initialisation, which no stage changes, while the model is
        trained as an IDM on D_L from that initialisation as IDM labeling trains it (the
        same stage: the stage cache serves one to the other); with ``finetuned``, None: the
        model itself, trained as a video model on D_U first, predicts its own future."""
        if unified:
            if ctx.config.pairing == "initial":
                return idm.fresh()
            common.train_role(ctx, idm, "video", ctx.unlabeled, "video_model")
            return None
        if not _learned(ctx.config, ctx.video_model is not None):
            return ctx.video_model
        return self._learned_video_model(ctx)

    def _learned_video_model(self, ctx: RunContext) -> RegressionVideoModel:
        """A video model learned on D_U: s' = s + net(s), squared error."""
        cfg: VMIDMConfig = ctx.config
        spec = ctx.spec
        vm_arch = ctx.architecture(cfg.vm_arch or ("mlp5" if spec.obs_kind == "vector" else "cnn5"))
        unlabeled = TransitionFrames(ctx.unlabeled, ctx.device)
        speed = speed_of(vm_arch, ctx.device)
        with ctx.seeded():
            vm_net = vm_arch.build(spec.obs_shape, math.prod(spec.obs_shape)).to(ctx.device)
        fit_regressor(
            speed.module(vm_net), unlabeled.inputs("obs"), unlabeled.inputs("delta"),
            ctx.plan.stage("video_model"),
            lr=cfg.lr or vm_arch.lr,
            batch_size=common.batch_size(cfg.batch_size, vm_arch, len(unlabeled)),
            seed=ctx.stream_seed("video_model"),
            rule=ctx.stopping,
            schedule=warmed_up(vm_arch.lr_schedule, cfg.warmup_steps),
            speed=speed,
        )  # fmt: skip
        return RegressionVideoModel(vm_net.eval(), spec.obs_shape)
