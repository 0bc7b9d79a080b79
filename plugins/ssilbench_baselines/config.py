"""The fields the baselines' configs share, each declared once.

The fields are annotated types rather than fields of a base model, so that every config
keeps its own order of fields (a learned video model's shared-stage identity is its config
as JSON).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from ssilbench.api import ArchOptions


class MethodConfig(BaseModel):
    """A baseline's config: unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")


LearningRate = Annotated[
    float | None, Field(gt=0, description="Adam learning rate; None = architecture's.")
]
StageBatchSize = Annotated[
    int | None,
    Field(ge=1, description="Minibatch size; None = architecture's rule for each stage's data."),
]
UnifiedOptions = Annotated[
    ArchOptions,
    Field(default_factory=dict, description="Settings of a unified architecture (e.g. UVA's)."),
]
