"""RunSpec and Sweep: what one run is, and the product of axes that a sweep expands into."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ssilbench.data.split import parse_budget

SPEC_VERSION = 4  # 2: stop_early and rollouts joined the spec; 3: evaluations forward live
# episodes only (sampled scores differ from version 2) and labels are taken in chunks;
# 4: the environment's protocol, the dataset and the plugins' versions joined the spec


class RunSpec(BaseModel):
    """One run: fully resolved (defaults filled in), so its hash identifies its result.

    Besides the names and settings a user chose, the spec holds what else decides the
    result: ``protocol``, the fingerprint of the task's :class:`~ssilbench.api.EnvSpec`
    (evaluation episodes and seed, normaliser, horizon, ...); ``plugins``, the distribution
    and version of each plugin the run uses; and ``data``, the fingerprint of the dataset's
    manifest. :func:`ssilbench.runner.plan.resolve` fills in the first two without touching
    a file; :func:`ssilbench.runner.plan.prepare` opens the datasets and fills in ``data``.
    Runs recorded before spec version 4 have none of the three (``None``/empty)."""

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
    protocol: str | None = None
    plugins: dict[str, str] = {}
    data: str | None = None
    version: int = SPEC_VERSION

    def canonical_json(self) -> str:
        return _canonical(self.model_dump(mode="json"))

    @property
    def run_id(self) -> str:
        """The run's identity: a hash of everything in the spec."""
        return _digest(self.canonical_json())

    @property
    def design_id(self) -> str:
        """The run as designed, whatever its data: everything but ``data``. A figure or a
        status drawn from the store finds its runs by this key without opening a dataset."""
        return _digest(_canonical(self.model_dump(mode="json", exclude={"data"})))

    @property
    def cohort(self) -> str:
        """What the runs pooled into one leaderboard cell must share: everything but the
        seed (and the budget, which is the cell's column)."""
        return _digest(_canonical(self.model_dump(mode="json", exclude={"seed", "budget"})))

    @property
    def prepared(self) -> bool:
        return self.data is not None


def _canonical(doc: Any) -> str:
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:20]


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
