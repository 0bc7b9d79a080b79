"""A run's stages, as the contract names them: what a method declares (:class:`Stage`), the
budget each spends (:class:`StagePlan`, :class:`StageBudget`: step parity), when one may end
before its budget (:class:`StoppingRule`) and how its learning rate moves
(:class:`WarmupLinear`).

A method declares its stages up front (:meth:`ssilbench.api.Method.stages`); the harness
checks that their steps sum to the run's budget, and each stage's budget refuses to be
overspent. Policy stages trigger the periodic evaluation every ``eval_every`` steps.

These are plain data and bookkeeping, part of the contract: :mod:`ssilbench.api` and
:mod:`ssilbench.kit` export them, and the training machinery (:mod:`ssilbench.train`) builds
on them. This module imports nothing else of ssilbench, so the contract never reaches into
the core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Stage:
    """A named training stage with its share of the run's step budget.

    A stage may have 0 steps (e.g. labeling data with a model fitted in closed form).

    ``policy`` stages train the policy that is evaluated periodically; ``data`` says which
    view the stage reads (for caching and for the reader of a method card).
    """

    name: str
    steps: int
    policy: bool = False
    data: Literal["labeled", "unlabeled", "both", "none"] = "labeled"
    share: str | None = None
    """Declares that other runs train this very stage: an identity of its computation (e.g.
    ``"lapo_world_model:<settings digest>"``) equal for every run, of any method, that trains
    the same weights on the same task. The planner trains one run of each shared stage first
    and the runs that reuse it after, and ``run --dry-run`` counts it once. None: the run's
    own stage (the stage cache still reuses any identical stage it meets)."""
    per: tuple[Literal["seed", "budget"], ...] = ()
    """Run axes a shared stage still depends on: ``("seed",)`` for a stage shared by the label
    budgets of one seed (it reads D_U only, but trains under the run's seed)."""


class StepParityError(RuntimeError):
    """A method declared or spent steps that do not add up to the run's budget."""


def check_stages(stages: list[Stage], total: int, method: str) -> None:
    """Refuse (:class:`StepParityError`) the stages ``method`` declared when two share a
    name, one has negative steps or their steps do not sum to the run's ``total``."""
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
        if stopped_early:
            self._forgo_unspent()
        if self.stage.policy and self.policy is not None:
            self.plan.evaluate(self.policy)

    def stop_early(self, reason: str) -> None:
        """End the stage before its budget (a documented stopping rule); recorded per run."""
        first = self.stopped_early is None
        self.stopped_early = reason
        if first:
            self._forgo_unspent()
        already = self.used % self.plan.eval_every == 0  # tick() has just evaluated it
        if self.stage.policy and self.policy is not None and not already:
            self.plan.evaluate(self.policy)

    def _forgo_unspent(self) -> None:
        # The run's progress counts to the steps it will take, so that its time left is not
        # that of the steps this stage leaves unspent.
        telemetry = self.plan.telemetry
        if telemetry is not None:
            telemetry.forgo(self.stage.steps - self.used)


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

    def side_stage(self, name: str, steps: int) -> StageBudget:
        """A budget of ``steps`` for training outside the declared stages: a shared
        initialisation (an autoencoder, a pretrained backbone) that runs of one task reuse
        through the stage cache. Its steps are not the run's; a step-time measurement
        limits and times them as it does a declared stage's."""
        side = StagePlan([Stage(name, steps)], eval_every=max(steps, 1),
                         evaluate=lambda policy: None, cache=self.cache)  # fmt: skip
        return side.stage(name)

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
                if checkpoints is not None and stage.name in checkpoints.resumed_devices:
                    report[stage.name]["resumed_devices"] = checkpoints.resumed_devices[stage.name]
        return report


@dataclass(frozen=True)
class StoppingRule:
    """When a stage may end before its budget, the same for every method and run.

    Every ``check_every`` steps the full training loss (and, for classifiers, the training
    accuracy against the targets' argmax) is measured; the stage stops when the loss is
    below ``abs_tol``, improved by less than ``rel_tol`` (relative; None: never) since the
    previous check, or, with ``on_accuracy``, every training example is classified
    correctly.
    """

    check_every: int = 500
    abs_tol: float = 1e-3
    rel_tol: float | None = 0.001
    on_accuracy: bool = True

    def converged(self, previous: float, loss: float, accuracy: float | None) -> bool:
        return (
            loss < self.abs_tol
            or (self.rel_tol is not None and (previous - loss) < self.rel_tol * previous)
            or (self.on_accuracy and accuracy is not None and accuracy >= 1.0)
        )

    def describe(self) -> str:
        reasons = [f"training loss < {self.abs_tol:g}"]
        if self.rel_tol is not None:
            reasons.append(f"improved by < {self.rel_tol:.1%} over {self.check_every} steps")
        if self.on_accuracy:
            reasons.append("training accuracy 100%")
        if len(reasons) == 1:
            return f"converged: {reasons[0]} (checked every {self.check_every} steps)"
        return "converged: " + ", ".join(reasons[:-1]) + f", or {reasons[-1]}"


@dataclass(frozen=True)
class WarmupLinear:
    """The factor on the base learning rate goes linearly from ``start`` to 1 over the first
    ``warmup`` share of the stage's steps (or over its first ``warmup_steps`` steps, when
    given), then linearly to ``end`` at its last step.

    The paper's Procgen code warms the learning rate up linearly and then decays it linearly
    to the end of each stage. Shares of the stage (rather than step counts) keep that shape
    when ``--steps-scale`` shortens a run; a warm-up given in steps instead
    (``warmup_steps``) lasts that many steps whatever the stage's length, as the reference
    code's does. ``ssilbench.train.schedule.set_lr`` applies it."""

    start: float
    warmup: float
    end: float
    warmup_steps: int | None = None

    def __post_init__(self) -> None:
        if self.warmup_steps is not None and self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be at least 0, got {self.warmup_steps}")

    def factor(self, step: int, total: int) -> float:
        """The factor for the optimiser step that follows ``step`` steps already taken."""
        if total <= 1:
            return 1.0
        ramp = self.warmup * total if self.warmup_steps is None else self.warmup_steps
        if step < ramp:
            return self.start + (1 - self.start) * step / ramp
        return 1 + (self.end - 1) * (step - ramp) / max(total - 1 - ramp, 1e-9)
