"""UVA multitask: one network trained on D_L in every task mode (one mode per minibatch),
sampled as a policy (``sampling=policy``) or as VM-IDM (``sampling=vm_idm``: future frames
in video-model mode, then actions in inverse-dynamics mode, from the same network).

The network starts from the shared initialisation of ``ssilbench_uva.architecture``
(video-model pretraining on D_U). Both sampling paths train identical weights: a second run
that differs only in ``sampling`` reuses the first one's trained stage from the cache.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ssilbench.api import ArchitectureName, ArchOptions, EnvSpec, Method, RunContext, Stage
from ssilbench.kit import unified
from ssilbench_uva.modes import MODES


class UVAConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    arch: ArchitectureName = Field(None, description="A unified architecture: uva or uva_base.")
    arch_options: ArchOptions = Field(
        default_factory=dict, description="UVA settings (sizes, checkpoints, pretraining)."
    )
    sampling: Literal["policy", "vm_idm"] = Field(
        "policy", description="policy: actions in policy mode; vm_idm: video, then inverse mode."
    )
    modes: tuple[str, ...] = Field(MODES, description="Task modes drawn uniformly per minibatch.")

    @field_validator("modes")
    @classmethod
    def _known_modes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [m for m in value if m not in MODES]
        if unknown or not value:
            raise ValueError(f"modes must be a non-empty subset of {', '.join(MODES)}")
        return value


class UVAMethod(Method):
    description = "UVA trained on D_L in all five task modes; sampled as a policy or as VM-IDM."
    Config = UVAConfig

    def stages(self, cfg: UVAConfig, total_steps: int, spec: EnvSpec, has_video_model: bool):
        return [Stage("multitask", total_steps, policy=True, data="labeled")]

    def fit(self, ctx: RunContext):
        cfg: UVAConfig = ctx.config
        model = unified(ctx, cfg.arch, cfg.arch_options)
        policy = model.policy(cfg.sampling)
        budget = ctx.plan.stage("multitask", policy=policy)
        model.train(
            cfg.modes, ctx.labeled, budget, seed=ctx.stream_seed("multitask"), rule=ctx.stopping
        )
        return policy
