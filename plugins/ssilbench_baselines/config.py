"""The fields the baselines' configs share, each declared once.

The fields are annotated types rather than fields of a base model, so that every config
keeps its own order of fields (a learned video model's shared-stage identity is its config
as JSON).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import ArchOptions


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
