"""The fields the baselines' configs share, each declared once.

The fields are annotated types rather than fields of a base model, so that every config
keeps its own order of fields (a learned video model's shared-stage identity is its config
as JSON).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import ArchOptions
from ssilbench.kit import WarmupLinear


class MethodConfig(BaseModel):
    """A baseline's config: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")


LearningRate = Annotated[
    float | None, Field(gt=0, description="Adam learning rate; None = architecture's.")
]
StageBatchSize = Annotated[
    Annotated[int, Field(ge=1)] | Literal["full"] | None,
    Field(
        description="Minibatch size; 'full': every row of the stage's data at each step; "
        "None = architecture's rule for each stage's data."
    ),
]
Standardisation = Annotated[
    Literal["none", "labeled", "all"],
    Field(
        description="Standardise vector inputs (zero mean, unit variance per feature) over "
        "D_L's inputs ('labeled') or every transition's ('all'), as the maze paper's code "
        "does; 'none': raw inputs."
    ),
]
UnifiedOptions = Annotated[
    ArchOptions,
    Field(default_factory=dict, description="Settings of a unified architecture (e.g. UVA's)."),
]
WarmupSteps = Annotated[
    int | None,
    Field(
        ge=0,
        description="Warm-up of an architecture's learning-rate schedule (impala's), in steps "
        "(the reference code's: 1000); None: the architecture's share of each stage (1/60).",
    ),
]
REFERENCE_WARMUP_STEPS = 1000
"""The paper's Procgen code warms every stage up over its first 1,000 steps, however long."""


def warmed_up(schedule: WarmupLinear | None, warmup_steps: int | None) -> WarmupLinear | None:
    """An architecture's schedule with the config's warm-up: ``warmup_steps`` steps, or the
    schedule's own share of the stage when None. Architectures without one keep none."""
    if schedule is None:
        return None
    return replace(schedule, warmup_steps=warmup_steps)
