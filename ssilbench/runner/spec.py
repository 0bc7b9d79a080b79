"""RunSpec and Sweep: what one run is, and the product of axes that a sweep expands into."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ssilbench.data.split import parse_budget

SPEC_VERSION = 3  # 2: stop_early and rollouts joined the spec; 3: evaluations forward live
# episodes only (sampled scores differ from version 2) and labels are taken in chunks


class RunSpec(BaseModel):
    """One run: fully resolved (defaults filled in), so its hash identifies its result."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    method: str
    config: dict[str, Any]
    env: str
    options: dict[str, Any]
    budget: str
    seed: int
    steps: int
    eval_every: int
    stop_early: bool = False
    rollouts: bool = True
    version: int = SPEC_VERSION

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    @property
    def run_id(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:20]


class Sweep(BaseModel):
    """Lists of methods, environment ids, budgets and seeds, plus shared settings.

    ``config`` maps a key to a value for every method that has it; ``"method.key"`` scopes a
    key to one method. ``options`` are environment options applied to every environment.
    """

    model_config = ConfigDict(extra="forbid")

    methods: list[str] = Field(min_length=1)
    envs: list[str] = Field(min_length=1)
    budgets: list[str] = Field(min_length=1)
    seeds: list[int] = Field(min_length=1)
    config: dict[str, Any] = {}
    options: dict[str, Any] = {}
    steps: int | None = Field(None, ge=1)
    steps_scale: float | None = Field(None, gt=0)
    """Train ``steps_scale`` x the environment's default steps (``steps`` wins when both)."""
    eval_every: int | None = Field(None, ge=1)
    stop_early: bool = False
    rollouts: bool = True

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, value: list[str]) -> list[str]:
        return [parse_budget(v) for v in value]

    def total_steps(self, default: int) -> int:
        """Each run's step budget on an environment whose default is ``default``."""
        if self.steps is not None:
            return self.steps
        if self.steps_scale is not None:
            return max(1, round(default * self.steps_scale))
        return default

    def axes(self) -> itertools.product:
        return itertools.product(self.envs, self.methods, self.budgets, self.seeds)
