"""What a sweep will train, known before it runs: the runs not recorded yet, the labeled
transitions of each run's budget, the runs each trains stacked with, whether a stage's data
is small enough to stack, and the (method, stage) tallies a dry run costs
(:mod:`ssilbench.runner.dryrun`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ssilbench.api import Stage
from ssilbench.data.split import available_items, resolve_budget
from ssilbench.errors import SsilbenchError
from ssilbench.planning.plan import SweepPlan, TaskInfo
from ssilbench.runner.timings import MAX_LABELED
from ssilbench.runs.spec import RunSpec


@dataclass
class StageWork:
    """One (method, stage) of the sweep: how many trainings it takes and for how many runs.
    A method run with several configs, or a stage with several step counts, has one per
    config and step count: their step times differ (an LC and an MLP are not one mean)."""

    method: str
    stage: str
    steps: int
    shared: bool
    runs: int = 0
    trainings: int = 0
    cached: int = 0
    compute: float = 0.0
    """Seconds of the trainings to do, each at its run's step time (alone or stacked)."""
    unknown: bool = False
    """Some training to do has no measured step time."""
    outside: bool = False
    """Trained outside the declared stages (``StagePlan.side_stage``), once per task."""
    label: str = ""
    """The method with its non-default config spelled out (``bc (arch=lc)``) where the sweep
    runs the method with several configs; empty: the method's name says it."""

    @property
    def shown(self) -> str:
        """What the plan's table names the row by."""
        return self.label or self.method

    @property
    def to_train(self) -> int:
        return self.trainings - self.cached

    @property
    def seconds(self) -> float | None:
        return None if self.unknown else self.compute

    @property
    def seconds_per_step(self) -> float | None:
        """The mean step time of a run's training (None: not measured, or nothing to do)."""
        if self.unknown or not self.to_train:
            return None
        return self.compute / (self.to_train * self.steps)


def stacked_with(plan: SweepPlan, units: list[list[int]]) -> dict[int, int]:
    """Run index -> how many runs it trains stacked with, itself included: the runs of its
    unit with its label budget (runs of other budgets train in groups of their own)."""
    out = {}
    for unit in units:
        budgets = [plan.runs[i].budget for i in unit]
        for i, budget in zip(unit, budgets, strict=True):
            out[i] = budgets.count(budget)
    return out


def _budget_items(task: TaskInfo, spec: RunSpec) -> int | None:
    """The items (in the task's budget unit) a run's budget stands for, where they are known
    before it runs: resolved against the task's dataset, or a count of transitions without
    one; None otherwise."""
    unit = task.spec.budget_unit
    if task.dataset is None:
        count = spec.budget.isascii() and spec.budget.isdigit()
        return int(spec.budget) if count and unit == "transitions" else None
    try:
        return resolve_budget(spec.budget, available_items(task.dataset, unit), unit)
    except SsilbenchError:
        return None


def stage_stacks(stage: Stage, spec: RunSpec, task: TaskInfo) -> bool:
    """Whether the stage's data is small enough for the trainer to stack it
    (``STACK_BYTES`` of inputs as floats, an IDM's pairs counted twice); a larger stage
    trains alone, reading its minibatches from the store. Where the sizes are not known yet
    (no dataset, and a budget that is not a count of transitions), costed alone."""
    from ssilbench.train.batched import STACK_BYTES

    frame = 4 * math.prod(task.spec.obs_shape)
    data = task.dataset
    if stage.data == "none":
        return True
    labeled = _budget_items(task, spec)
    if labeled is None:
        return False
    if data is None:
        return stage.data == "labeled" and labeled * 2 * frame <= STACK_BYTES
    available = available_items(data, task.spec.budget_unit)
    labeled_rows = data.num_transitions * labeled / max(available, 1)
    rows = {"labeled": labeled_rows, "unlabeled": data.num_transitions,
            "both": data.num_transitions + labeled_rows}[stage.data]  # fmt: skip
    return rows * 2 * frame <= STACK_BYTES


def labeled_transitions(plan: SweepPlan, spec: RunSpec) -> int | None:
    """The labeled transitions a run trains on, where they are known before it runs: its
    budget resolved against the task's dataset, or a count of transitions without one."""
    task = plan.task_of(spec)
    return _budget_items(task, spec) if task.spec.budget_unit == "transitions" else None


def span_key(plan: SweepPlan, spec: RunSpec) -> tuple[str, str]:
    return SweepPlan.method_key(spec.method, spec.config), spec.env


def label_spans(plan: SweepPlan, indices: list[int]) -> dict[tuple[str, str], tuple[int, int]]:
    """(method config, task) -> the smallest and largest labeled transitions (at most
    MAX_LABELED) of its runs among ``indices``: the budgets its step times are measured at."""
    spans: dict[tuple[str, str], tuple[int, int]] = {}
    for i in indices:
        n = labeled_transitions(plan, plan.runs[i])
        if n is None:
            continue
        n = max(1, min(n, MAX_LABELED))
        key = span_key(plan, plan.runs[i])
        lo, hi = spans.get(key, (n, n))
        spans[key] = (min(lo, n), max(hi, n))
    return spans


class Recorded(NamedTuple):
    """What a store holds of a sweep: the run ids it would skip, and their setup ids (by
    which runs whose dataset is not built yet, and so have no run id, are found)."""

    run_ids: set[str]
    setup_ids: set[str]


def recorded(plan: SweepPlan, results_dir: Path, retry_failed: bool = False) -> Recorded:
    """The run ids a sweep of ``plan`` would skip (done runs, and failed ones unless they are
    to be retried) and their setup ids, read only when some run of ``plan`` has no data
    fingerprint yet."""
    from ssilbench.runs.store import read_designs, read_statuses

    skipped = ("done",) if retry_failed else ("done", "failed")
    done = {r for r, status in read_statuses(results_dir).items() if status in skipped}
    unbuilt = any(spec.data is None for spec in plan.runs)
    return Recorded(done, read_designs(results_dir, skipped) if unbuilt and done else set())


def pending_runs(
    plan: SweepPlan, done_ids: set[str], done_designs: set[str]
) -> tuple[list[int], int]:
    """(the indices of ``plan``'s runs a sweep would train, how many others were found
    recorded by setup id alone: runs without a data fingerprint yet, see :class:`Recorded`)."""
    pending, by_design = [], 0
    for i, spec in enumerate(plan.runs):
        if spec.run_id in done_ids:
            continue
        if spec.data is None and spec.setup_id in done_designs:
            by_design += 1
            continue
        pending.append(i)
    return pending, by_design
