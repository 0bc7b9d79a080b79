"""What a sweep will do before it does it: its runs, the stages it will train (which are
shared by several runs, which are in the stage cache already) and what that costs.

Stages that several runs share (``Stage.share``: LAPO's world model, shared by every lapo and
lapo_plus run of a game) are trained once; the sweep therefore schedules one run of each
shared stage first (:func:`leaders_first`) and the runs that reuse it after, so that
workers do not sit waiting for a stage another worker trains.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

from ssilbench.api import Stage
from ssilbench.data.datasets import DatasetNotBuilt
from ssilbench.data.split import available_items, resolve_budget
from ssilbench.errors import SsilbenchError
from ssilbench.planning.plan import SweepPlan, TaskInfo
from ssilbench.planning.problems import Problem, dataset_problem_lines
from ssilbench.runner.schedule import execution_units, stage_identities
from ssilbench.runner.timings import (
    MAX_LABELED,
    Measurement,
    Timings,
    measure,
    measurement_key,
)
from ssilbench.runs.spec import RunSpec
from ssilbench.train.memo import StageCache


@dataclass
class StageWork:
    """One (method, stage) of the sweep: how many trainings it takes and for how many runs."""

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


@dataclass
class DryRun:
    plan: SweepPlan
    pending: list[int]
    done: int
    works: list[StageWork]
    measurements: dict[str, tuple[str, Measurement | None]]
    """By measurement key: the method and its measurement (None: not measured)."""
    training_s: float | None
    evaluation_s: float | None
    other_s: float | None
    device: str
    workers: int
    measured_now: set[str] = field(default_factory=set)
    """The keys of the measurements made by this dry run (the others were kept)."""
    by_design: int = 0
    """Of ``done``: runs whose dataset is not built yet, found recorded by setup id (all
    but the data, :attr:`~ssilbench.runs.spec.RunSpec.setup_id`)."""

    @property
    def wall_seconds(self) -> float | None:
        """The estimated wall time (the compute shared among the workers), or None where
        the training time is not known."""
        if self.training_s is None:
            return None
        parts = (self.training_s, self.other_s, self.evaluation_s)
        return sum(s for s in parts if s is not None) / max(1, self.workers)

    def summary(self) -> str:
        """One line: how many runs, and the estimate."""
        wall = self.wall_seconds
        cost = "no estimate" if wall is None else f"about {_hours(wall)}"
        return (f"{len(self.pending)} run(s) to train on {self.device}: {cost} (training "
                "steps x step times measured on this device, evaluations at most)")  # fmt: skip

    def render(self) -> str:
        lines = [
            f"{len(self.plan.runs)} run(s): {self.done} already recorded, "
            f"{len(self.pending)} to run, on {self.device}"
            + (f" with {self.workers} workers" if self.workers > 1 else "")
            + "."
        ]
        if self.by_design:
            lines.append(
                f"({self.by_design} of the recorded runs are matched by design: their "
                "datasets are not built here yet. A run builds them first and skips these "
                "runs where the data it builds is the data they were recorded with.)"
            )
        lines += self._dataset_lines()
        if self.works:
            lines += ["", "Stages to train:", _table(self.works)]
            if any(w.shared for w in self.works):
                lines.append(
                    "  * shared: trained once for every run that needs it (by the "
                    "first of them), or taken from the stage cache"
                )
        lines.append("")
        parts = [
            ("training", self.training_s),
            ("labelling and data", self.other_s),
            ("evaluation (at most)", self.evaluation_s),
        ]
        known = [(name, s) for name, s in parts if s is not None]
        if known:
            total = sum(s for _, s in known)
            lines.append(
                "Estimated compute: "
                + ", ".join(f"{n} {_hours(s)}" for n, s in known)
                + f"; in all {_hours(total)}"
                + (
                    f", about {_hours(total / self.workers)} of wall time"
                    if self.workers > 1
                    else ""
                )
                + "."
            )
        unmeasured = sorted({name for name, m in self.measurements.values() if m is None})
        if unmeasured:
            lines.append(
                f"No step times measured on this device for: {', '.join(unmeasured)} "
                "(run 'ssilbench plan' with the same arguments to measure them)."
            )
        elif self.measurements:
            lines.append(
                "Step times: measured on this device (steady state of a few steps of "
                "each stage on a small store of the task's shape)" + self._when() + "."
            )
            labeled = sorted({m.labeled for _, m in self.measurements.values()
                              if m is not None and m.labeled is not None})  # fmt: skip
            if labeled:
                lines.append(
                    "Each method and task is measured at the smallest and largest of its "
                    "runs' label budgets ("
                    + ", ".join(f"{n:,}" for n in labeled)
                    + " labeled transitions), and a run's step time is interpolated "
                    "linearly between."
                )
            sizes = sorted({m.stacked for _, m in self.measurements.values()
                            if m is not None and m.stacked > 1})  # fmt: skip
            if sizes:
                lines.append(
                    "Runs the sweep stacks are measured stacked too ("
                    + ", ".join(map(str, sizes))
                    + " runs fitted together, as many as share a unit and a label budget); "
                    "s/step is one run's share."
                )
        return "\n".join(lines)

    def _when(self) -> str:
        """When and at what load the step times were measured: now, or kept from earlier
        plans (the oldest), with how to measure them again."""
        found = {key: m for key, (_, m) in self.measurements.items() if m is not None}
        parts = []
        now = [m for key, m in found.items() if key in self.measured_now]
        kept = [m for key, m in found.items() if key not in self.measured_now]
        if now:
            parts.append("now" + _at_load(now))
        if kept:
            oldest = min(m.measured_at for m in kept)
            stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(oldest))
            parts.append(f"{len(kept)} kept in timings.json from earlier plans (the oldest from "
                         f"{stamp}{_at_load(kept)}; 'ssilbench plan --remeasure' measures "
                         "them again)")  # fmt: skip
        return ": " + "; ".join(parts) if parts else ""

    def _dataset_lines(self) -> list[str]:
        """The tasks without a dataset yet: those a run builds, and those it cannot (not
        imported or damaged), listed with what to do as a run would list them."""
        absent = [t for t in self.plan.tasks.values() if t.dataset is None]
        if not absent:
            return []
        built = sorted(t.env for t in absent if isinstance(t.unavailable, DatasetNotBuilt))
        lines = []
        if built:
            lines.append(f"Datasets a run builds first: {', '.join(built)}.")
        missing = [
            Problem("dataset", t.env, t.unavailable, t)
            for t in absent
            if t.unavailable is not None and not isinstance(t.unavailable, DatasetNotBuilt)
        ]
        if missing:
            lines.append("Datasets a run cannot make (without them the sweep stops before it "
                         "starts):")  # fmt: skip
            lines += dataset_problem_lines(missing, self.plan.data_root or Path("DATA_ROOT"))
        lines.append("(Step times of tasks without a dataset are measured on random frames "
                     "of their shape.)")  # fmt: skip
        return lines


def _stacked_with(plan: SweepPlan, units: list[list[int]]) -> dict[int, int]:
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


def _stacks(stage: Stage, spec: RunSpec, task: TaskInfo) -> bool:
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


def _span_key(plan: SweepPlan, spec: RunSpec) -> tuple[str, str]:
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
        key = _span_key(plan, plan.runs[i])
        lo, hi = spans.get(key, (n, n))
        spans[key] = (min(lo, n), max(hi, n))
    return spans


def interpolate(n: int, lo: int, hi: int, at_lo: float, at_hi: float) -> float:
    """The step time at ``n`` labeled transitions from those measured at ``lo`` and ``hi``:
    linear in between (a full-batch stage's work grows with N_L, a minibatch one's stays),
    and beyond ``hi`` (a budget over MAX_LABELED) growing at the measured slope, if any."""
    if hi == lo:
        return at_lo
    slope = (at_hi - at_lo) / (hi - lo)
    if n <= hi:
        return at_lo + slope * (max(n, lo) - lo)
    return at_hi + max(0.0, slope) * (n - hi)


def probe_steps(
    plan: SweepPlan, results_dir: Path, per_stage: int, retry_failed: bool = False
) -> tuple[int, int]:
    """(the training steps of the runs a sweep will execute, the steps that measuring their
    step times trains: ``per_stage`` for every stage of each method config and task shape).
    Runs recorded already (and failed ones unless retried) are not executed."""
    todo, _ = pending_runs(plan, *recorded(plan, results_dir, retry_failed))
    spans = label_spans(plan, todo)
    pending, probed = 0, {}
    for i in todo:
        spec = plan.runs[i]
        pending += spec.steps
        task = plan.task_of(spec)
        span = spans.get(_span_key(plan, spec))
        for n in sorted(set(span)) if span else [None]:
            key = (SweepPlan.method_key(spec.method, spec.config), task.spec.obs_shape,
                   task.spec.num_actions, n)  # fmt: skip
            probed[key] = per_stage * sum(s.steps > 0 for s in plan.stages[spec.run_id])
    return pending, sum(probed.values())


def _hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:,.1f} h"


def _at_load(measurements: list[Measurement]) -> str:
    loads = [m.load for m in measurements if m.load is not None]
    if not loads:
        return ""
    low, high = min(loads), max(loads)
    return f", at load {low:.1f}" if high - low < 0.05 else f", at load {low:.1f}-{high:.1f}"


def _step_time(work: StageWork) -> str:
    if not work.to_train:
        return "-"
    return "?" if work.seconds_per_step is None else f"{work.seconds_per_step:.4g}"


def _table(works: list[StageWork]) -> str:
    head = ("method", "stage", "steps", "runs", "trainings", "cached", "s/step", "compute")
    rows = [head]
    for w in works:
        rows.append(
            (
                w.method,
                w.stage + ("*" if w.shared else ""),
                f"{w.steps:,}",
                str(w.runs),
                str(w.trainings),
                str(w.cached),
                _step_time(w),
                "?" if w.seconds is None else _hours(w.seconds),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join(
        "  "
        + "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    )


def dry_run(
    plan: SweepPlan,
    plugins,
    device,
    done_ids: set[str],
    cache_root: Path | None,
    timings: Timings,
    measure_missing: bool = True,
    workers: int = 1,
    log=lambda message: None,
    stack: bool | None = None,
    executor: bool = False,
    remeasure: bool = False,
    steps: int = 4,
    done_designs: set[str] | None = None,
) -> DryRun:
    """The stage plan and cost of running ``plan``'s runs not in ``done_ids``, in the units
    the sweep would run them in (``workers``, ``stack`` and ``executor`` as the sweep's).
    A run whose dataset is not built yet has no data fingerprint, so no run id a store can
    hold: it counts as recorded when its setup id is in ``done_designs``.
    Step times are taken from ``timings`` (unless ``remeasure``) or measured now and added
    to it (with ``measure_missing``), ``steps`` steps of each stage."""
    from ssilbench.runner.timings import device_description

    pending, by_design = pending_runs(plan, done_ids, done_designs or set())
    cached = StageCache(cache_root).shared_identities() if cache_root is not None else set()
    measurements: dict[str, tuple[str, Measurement | None]] = {}
    measured_now: set[str] = set()

    spans = label_spans(plan, pending)
    labeled = {i: labeled_transitions(plan, plan.runs[i]) for i in pending}

    def measured(index: int, stacked: int, labeled: int | None) -> Measurement | None:
        spec = plan.runs[index]
        method, task = plan.method_of(spec), plan.task_of(spec)
        stacked = stacked if method.cls.batched else 1
        key = measurement_key(method, task.spec, device, stacked, labeled)
        if key not in measurements:
            found = None if remeasure else timings.get(key)
            if found is None and measure_missing:
                together = f" ({stacked} runs stacked)" if stacked > 1 else ""
                at = f" at {labeled:,} labeled transitions" if labeled is not None else ""
                log(f"measuring step times of {spec.method} on {spec.env}{at}{together} ...")
                found = measure(method, task, plugins, device, steps=steps, stacked=stacked,
                                labeled=labeled)  # fmt: skip
                timings.add(found)
                measured_now.add(key)
            measurements[key] = (spec.method, found)
        return measurements[key][1]

    def step_seconds(index: int, stacked: int, stage: str) -> float | None:
        """The run's step time of ``stage``, at its label budget where that is known."""
        spec = plan.runs[index]
        span = spans.get(_span_key(plan, spec))
        n = labeled[index]
        if span is None or n is None:
            m = measured(index, stacked, None)
            return None if m is None or stage not in m.stages else m.stages[stage].seconds_per_step
        ends = [measured(index, stacked, end) for end in span]
        if any(m is None or stage not in m.stages for m in ends):
            return None
        at_lo, at_hi = (m.stages[stage].seconds_per_step for m in ends)  # type: ignore[union-attr]
        return interpolate(n, *span, at_lo, at_hi)

    stacked = _stacked_with(plan, execution_units(plan, pending, workers, stack, executor))
    works: dict[tuple[str, str], StageWork] = {}
    planned: set[str] = set()  # shared stages counted already (by any method)
    evaluation = other = 0.0
    eval_known = other_known = True
    for index in pending:
        spec = plan.runs[index]
        task = plan.task_of(spec)
        span = spans.get(_span_key(plan, spec))
        m = measured(index, 1, span[0] if span else None)
        for stage, identity in stage_identities(plan, index):
            work = works.setdefault(
                (spec.method, stage.name),
                StageWork(spec.method, stage.name, stage.steps, stage.share is not None),
            )
            work.runs += 1
            if identity is not None and identity in planned:
                continue
            work.trainings += 1  # shared: counted for the first run that needs it
            if identity is not None:
                planned.add(identity)
            if identity is not None and identity in cached:
                work.cached += 1
                continue
            k = stacked[index] if _stacks(stage, spec, task) else 1
            seconds = step_seconds(index, k, stage.name)
            if seconds is None:
                work.unknown = True
            else:
                work.compute += stage.steps * seconds
        if m is None:
            eval_known = other_known = False
            continue
        dataset = task.dataset
        if dataset is not None:
            other += m.other_seconds_per_transition * dataset.num_transitions
        else:
            other_known = False
        if spec.rollouts and not math.isnan(m.eval_forward_seconds):
            evaluations = sum(
                math.ceil(s.steps / spec.eval_every) for s in plan.stages[spec.run_id] if s.policy
            )
            evaluation += evaluations * task.spec.horizon * m.eval_forward_seconds
        elif spec.rollouts:
            eval_known = False
    ordered = sorted(works.values(), key=lambda w: (w.method, w.stage))
    training = None
    if all(w.seconds is not None for w in ordered):
        training = sum(w.seconds for w in ordered)  # type: ignore[misc]
    return DryRun(
        plan,
        pending,
        len(plan.runs) - len(pending),
        ordered,
        measurements,
        training,
        evaluation if eval_known else None,
        other if other_known else None,
        device_description(device),
        workers,
        measured_now,
        by_design,
    )


def recorded(
    plan: SweepPlan, results_dir: Path, retry_failed: bool = False
) -> tuple[set[str], set[str]]:
    """(the run ids a sweep of ``plan`` would skip: done runs, and failed ones unless they are
    to be retried; their setup ids, read only when some run of ``plan`` has no data
    fingerprint yet)."""
    from ssilbench.runs.store import read_designs, read_statuses

    skipped = ("done",) if retry_failed else ("done", "failed")
    done = {r for r, status in read_statuses(results_dir).items() if status in skipped}
    unbuilt = any(spec.data is None for spec in plan.runs)
    return done, read_designs(results_dir, skipped) if unbuilt and done else set()


def pending_runs(
    plan: SweepPlan, done_ids: set[str], done_designs: set[str]
) -> tuple[list[int], int]:
    """(the indices of ``plan``'s runs a sweep would train, how many others were found
    recorded by design id alone: runs without a data fingerprint yet, see :func:`dry_run`)."""
    pending, by_design = [], 0
    for i, spec in enumerate(plan.runs):
        if spec.run_id in done_ids:
            continue
        if spec.data is None and spec.setup_id in done_designs:
            by_design += 1
            continue
        pending.append(i)
    return pending, by_design
