"""Step-budget accounting: every method spends exactly the run's total steps across its stages.

A method declares its stages up front (:meth:`ssilbench.api.Method.stages`); the harness
checks that their steps sum to the run's budget, and each stage's budget refuses to be
overspent. Policy stages trigger the periodic evaluation every ``eval_every`` steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ssilbench.api import Stage


class StepParityError(RuntimeError):
    """A method declared or spent steps that do not add up to the run's budget."""


def check_stages(stages: list[Stage], total: int, method: str) -> None:
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise StepParityError(f"method '{method}' declares duplicate stage names: {names}")
    if any(s.steps < 0 for s in stages):
        raise StepParityError(f"method '{method}' declares a negative step count: {stages}")
    spent = sum(s.steps for s in stages)
    if spent != total:
        raise StepParityError(
            f"method '{method}' declares stages summing to {spent} steps, but the run's "
            f"budget is {total}: {', '.join(f'{s.name}={s.steps}' for s in stages)}"
        )


@dataclass
class StageBudget:
    """The steps of one stage; ``tick`` after each optimiser step."""

    stage: Stage
    plan: StagePlan
    policy: Any = None
    used: int = 0
    stopped_early: str | None = None
    reused: str | None = None
    resumed_from: int | None = None  # the step of the checkpoint this stage continued from

    @property
    def remaining(self) -> int:
        return 0 if self.stopped_early else self.stage.steps - self.used

    def tick(self) -> None:
        if self.used >= self.stage.steps:
            raise StepParityError(
                f"stage '{self.stage.name}' tried to take more than its {self.stage.steps} steps"
            )
        self.used += 1
        self.plan.global_step += 1
        if (
            self.stage.policy
            and self.policy is not None
            and (self.used % self.plan.eval_every == 0 or self.used == self.stage.steps)
        ):
            self.plan.evaluate(self.policy)

    def replay(self, used: int, stopped_early: str | None, reused: str) -> None:
        """Account for a stage whose trained result was reused: the same steps as when it
        was trained, and the one evaluation at its end."""
        if used > self.stage.steps or (used < self.stage.steps and not stopped_early):
            raise StepParityError(
                f"stage '{self.stage.name}' cannot reuse a result of {used} of "
                f"{self.stage.steps} steps"
            )
        self.used = used
        self.plan.global_step += used
        self.reused = reused
        self.stopped_early = stopped_early
        if self.stage.policy and self.policy is not None:
            self.plan.evaluate(self.policy)

    def stop_early(self, reason: str) -> None:
        """End the stage before its budget (a documented stopping rule); recorded per run."""
        self.stopped_early = reason
        already = self.used % self.plan.eval_every == 0  # tick() has just evaluated it
        if self.stage.policy and self.policy is not None and not already:
            self.plan.evaluate(self.policy)


@dataclass
class StagePlan:
    """The declared stages of one run and what each has spent."""

    stages: list[Stage]
    eval_every: int
    evaluate: Callable[[Any], Any]
    global_step: int = 0
    budgets: dict[str, StageBudget] = field(default_factory=dict)
    cache: Any = None
    """A ``ssilbench.train.memo.StageCache`` where trained stages may be reused."""
    checkpoints: Any = None
    """``ssilbench.train.checkpoint.RunCheckpoints`` when the run saves its training state."""
    scope: dict[str, Any] = field(default_factory=dict)
    """Where the run stands: its task (``env``), dataset (``data``), ``seed`` and ``budget``;
    a shared stage's cache entry records the part of it the stage depends on, so that a dry
    run can tell which shared stages are trained already."""
    telemetry: Any = None
    """A ``ssilbench.runner.telemetry.RunTelemetry`` the training loops report steps and
    losses to (progress and curves); None: nobody records them."""

    def stage(self, name: str, policy: Any = None) -> StageBudget:
        """Open the named stage; ``policy`` is evaluated periodically if it is a policy stage."""
        matches = [s for s in self.stages if s.name == name]
        if not matches:
            raise StepParityError(
                f"stage '{name}' was not declared; declared: {[s.name for s in self.stages]}"
            )
        if name in self.budgets:
            raise StepParityError(f"stage '{name}' was opened twice")
        budget = StageBudget(matches[0], self, policy)
        self.budgets[name] = budget
        return budget

    def check_spent(self) -> dict[str, dict[str, Any]]:
        """After fit: every declared stage ran and spent its steps (or stopped early)."""
        report = {}
        for stage in self.stages:
            budget = self.budgets.get(stage.name)
            if budget is None and stage.steps > 0:
                raise StepParityError(f"declared stage '{stage.name}' never ran")
            used = budget.used if budget else 0
            early = budget.stopped_early if budget else None
            if used != stage.steps and not early:
                raise StepParityError(
                    f"stage '{stage.name}' spent {used} of its {stage.steps} steps"
                )
            report[stage.name] = {"declared": stage.steps, "used": used, "stopped_early": early}
            if budget is not None and budget.reused:
                report[stage.name]["reused"] = budget.reused
            if budget is not None and budget.resumed_from is not None:
                report[stage.name]["resumed_from"] = budget.resumed_from
                checkpoints = self.checkpoints  # None if a plugin resumed by its own means
                seconds = (None if checkpoints is None
                           else checkpoints.resumed_seconds.get(stage.name))  # fmt: skip
                if seconds is not None:  # the run's wall time counts its earlier attempts
                    report[stage.name]["resumed_seconds"] = round(seconds, 3)
        return report
