"""What a sweep will cost before it runs: each stage it trains at the step times measured on
this device (kept in ``timings.json`` or measured now), its data preparation and its
evaluations, in the units the sweep would run (:mod:`ssilbench.runner.workload` says what
it trains; :mod:`ssilbench.runner.dryrun_report` prints it).

Stages that several runs share (``Stage.share``: LAPO's world model, shared by every lapo and
lapo_plus run of a game) are trained once; the sweep therefore schedules one run of each
shared stage first (:func:`~ssilbench.runner.schedule.leaders_first`) and the runs that
reuse it after, so that workers do not sit waiting for a stage another worker trains.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ssilbench.planning.plan import SweepPlan
from ssilbench.planning.values import display_label
from ssilbench.runner.dryrun_report import DryRun
from ssilbench.runner.schedule import execution_units, stage_identities
from ssilbench.runner.step_flops import COUNT_ALL
from ssilbench.runner.step_table import StepTable
from ssilbench.runner.timings import Measurement, Timings, measure, measurement_key
from ssilbench.runner.workload import (
    Recorded,
    StageWork,
    label_spans,
    labeled_transitions,
    pending_runs,
    recorded,
    span_key,
    stacked_with,
    stage_stacks,
)
from ssilbench.train.memo import StageCache

if TYPE_CHECKING:
    import torch

    from ssilbench.plugins import Plugins


@dataclass(frozen=True)
class DryRunSettings:
    """How the sweep would run its runs, and how the dry run finds their step times."""

    workers: int = 1
    stack: bool | None = None
    executor: bool = False
    """Units as an executor (Ray, SLURM) would be given them."""
    cache_root: Path | None = None
    """The stage cache where shared stages trained before are found (None: no cache)."""
    measure_missing: bool = True
    """Measure the step times ``timings`` does not keep (else they are unknown)."""
    remeasure: bool = False
    """Measure every step time again, those kept included."""
    steps: int = 4
    """Steps of each stage a measurement trains."""
    shipped: bool = True
    """Take the shipped step times (:mod:`ssilbench.runner.step_table`) where none are
    kept in ``timings``."""
    count_flops: bool = True
    """Count the FLOPs of a key the shipped ones lack, to scale its step time (seconds at
    small sizes, minutes at the paper's); else only shipped counts scale."""


def dry_run(
    plan: SweepPlan,
    plugins: Plugins,
    device: torch.device,
    timings: Timings,
    done: Recorded,
    settings: DryRunSettings = DryRunSettings(),
    log: Callable[[str], None] = lambda message: None,
) -> DryRun:
    """The stage plan and cost of running ``plan``'s runs not ``done``, in the units the
    sweep would run them in (``settings.workers``, ``stack`` and ``executor`` as the
    sweep's). A run whose dataset is not built yet has no data fingerprint, so no run id a
    store can hold: it counts as recorded when its setup id is among ``done.setup_ids``.
    Step times are taken from ``timings`` (unless ``settings.remeasure``) or measured now and
    added to it (with ``settings.measure_missing``), ``settings.steps`` steps of each stage."""
    from ssilbench.runner.timings import device_description

    pending, by_design = pending_runs(plan, *done)
    root = settings.cache_root
    cached = StageCache(root).shared_identities() if root is not None else set()
    times = _StepTimes(plan, plugins, device, timings, settings, log, pending)
    units = execution_units(plan, pending, settings.workers, settings.stack, settings.executor)
    stacked = stacked_with(plan, units)
    if settings.measure_missing:  # find what is missing first, to say "k of n" measuring it
        finder = _Tally(plan, times, stacked, cached)
        for index in pending:
            finder.add(index)
        times.measure_found()
    tally = _Tally(plan, times, stacked, cached)
    for index in pending:
        tally.add(index)
    ordered = sorted(_named(tally.works.values()), key=lambda w: (w.shown, w.stage, w.steps))
    ordered += tally.side_works()
    training = None
    if all(w.seconds is not None for w in ordered):
        training = sum(w.seconds for w in ordered)  # type: ignore[misc]
    return DryRun(
        plan,
        pending,
        len(plan.runs) - len(pending),
        ordered,
        times.measurements,
        training,
        tally.evaluation if tally.eval_known else None,
        tally.other if tally.other_known else None,
        device_description(device),
        settings.workers,
        times.measured_now,
        by_design,
        times.shipped,
    )


class _StepTimes:
    """The step times runs are costed at, by measurement key: kept in ``timings`` (unless
    remeasured) or measured now and added to them, each measured once."""

    def __init__(
        self,
        plan: SweepPlan,
        plugins: Plugins,
        device: torch.device,
        timings: Timings,
        settings: DryRunSettings,
        log: Callable[[str], None],
        pending: list[int],
    ) -> None:
        self.plan, self.plugins, self.device = plan, plugins, device
        self.timings, self.settings, self.log = timings, settings, log
        self.measurements: dict[str, tuple[str, Measurement | None]] = {}
        self.measured_now: set[str] = set()
        self.shipped: set[str] = set()  # keys whose step times the shipped table gave
        self.table = StepTable() if settings.shipped else None
        self.missing: dict[str, tuple[int, int, int | None]] = {}
        """Keys neither kept nor measured yet: the run, stacking and labels to measure."""
        self.spans = label_spans(plan, pending)
        self.labeled = {i: labeled_transitions(plan, plan.runs[i]) for i in pending}
        self.keys: dict[tuple, str] = {}

    def measured(self, index: int, stacked: int, labeled: int | None) -> Measurement | None:
        """The measurement of the run's method and task, ``stacked`` runs fitted together at
        ``labeled`` labeled transitions (None: not kept, and not measured now)."""
        plan, settings = self.plan, self.settings
        spec = plan.runs[index]
        method, task = plan.method_of(spec), plan.task_of(spec)
        stacked = stacked if method.cls.batched else 1
        # thousands of runs share a few keys: each is written out once (json, config dump)
        memo = (id(method), id(task), stacked, labeled)
        key = self.keys.get(memo) or measurement_key(method, task.spec, self.device, stacked,
                                                     labeled)  # fmt: skip
        self.keys[memo] = key
        if key in self.measurements:
            return self.measurements[key][1]
        found = None if settings.remeasure else self.timings.get(key)
        if found is None and not settings.remeasure and self.table is not None:
            found = self._from_table(key, method, task)
        if found is None and settings.measure_missing:
            self.missing[key] = (index, stacked, labeled)  # measured by measure_found()
            return None
        if found is not None and self.table is not None and os.environ.get(COUNT_ALL):
            self.table.flops.count(key, method, task, self.plugins)
            self.table.flops.save()
        self.measurements[key] = (spec.method, found)
        return found

    def _from_table(self, key: str, method, task) -> Measurement | None:
        """The shipped step times of ``key``: measured (or interpolated between measured
        label counts), else scaled by counted FLOPs from measured ones of the device kind,
        else the nearest label count's. With ``measure_missing`` only the first: the user
        asked for measurements, and the other two are estimates (a scaled one is rough)."""
        table = self.table
        assert table is not None
        found = table.measured(key)
        if found is None and self.settings.measure_missing:
            return None
        if found is None and table.can_scale(key):
            flops = table.flops.get(key)
            if flops is None and self.settings.count_flops:
                self.log(f"counting the FLOPs of {method.name} on {task.env} (no arithmetic) ...")
                flops = table.flops.count(key, method, task, self.plugins)
            found = table.scaled(key, flops) if flops is not None else None
        if found is None:
            found = table.get(key)
        if found is not None:
            self.shipped.add(key)
        return found

    def measure_found(self) -> None:
        """Measure the step times found missing (see :meth:`measured`), saying "k of n"
        before each, and keep them in ``timings``."""
        total = len(self.missing)
        for k, (key, (index, stacked, labeled)) in enumerate(self.missing.items(), 1):
            spec = self.plan.runs[index]
            together = f" ({stacked} runs stacked)" if stacked > 1 else ""
            at = f" at {labeled:,} labeled transitions" if labeled is not None else ""
            self.log(f"measuring step times {k} of {total}: {spec.method} on {spec.env}{at}"
                     f"{together} ...")  # fmt: skip
            found = measure(self.plan.method_of(spec), self.plan.task_of(spec), self.plugins,
                            self.device, steps=self.settings.steps, stacked=stacked,
                            labeled=labeled)  # fmt: skip
            self.timings.add(found)
            self.measured_now.add(key)
            self.measurements[key] = (spec.method, found)
        self.missing.clear()

    def alone(self, index: int) -> Measurement | None:
        """The run trained alone, at the smallest label budget its step times are measured
        at: what its data preparation and evaluations are costed from."""
        span = self.spans.get(span_key(self.plan, self.plan.runs[index]))
        return self.measured(index, 1, span[0] if span else None)

    def step_seconds(self, index: int, stacked: int, stage: str) -> float | None:
        """The run's step time of ``stage``, at its label budget where that is known."""
        span = self.spans.get(span_key(self.plan, self.plan.runs[index]))
        n = self.labeled[index]
        if span is None or n is None:
            m = self.measured(index, stacked, None)
            return None if m is None or stage not in m.stages else m.stages[stage].seconds_per_step
        ends = [self.measured(index, stacked, end) for end in span]
        if any(m is None or stage not in m.stages for m in ends):
            return None
        at_lo, at_hi = (m.stages[stage].seconds_per_step for m in ends)  # type: ignore[union-attr]
        return interpolate(n, *span, at_lo, at_hi, _knee(span, ends, stage))


class _Tally:
    """The dry run's sums, run by run: each (method, stage)'s trainings at their step times
    (a shared stage once, one in the stage cache not at all), data preparation, evaluations."""

    def __init__(
        self, plan: SweepPlan, times: _StepTimes, stacked: dict[int, int], cached: set[str]
    ) -> None:
        self.plan, self.times, self.stacked, self.cached = plan, times, stacked, cached
        self.works: dict[tuple[str, str, int], StageWork] = {}
        self.planned: set[str] = set()  # shared stages counted already (by any method)
        self.evaluation = self.other = 0.0
        self.eval_known = self.other_known = True
        self.side: dict[tuple, list[tuple[str, float]]] = {}
        """Side stages by what identifies one training: (method, step time) of each run."""

    def add(self, index: int) -> None:
        """Count the run's stages, data preparation and evaluations."""
        m = self.times.alone(index)
        self._add_stages(index)
        if m is None:
            self.eval_known = self.other_known = False
            return
        self._add_side_stages(index, m)
        spec = self.plan.runs[index]
        task = self.plan.task_of(spec)
        dataset = task.dataset
        if dataset is not None:
            self.other += m.other_seconds_per_transition * dataset.num_transitions
        else:
            self.other_known = False
        if spec.rollouts and not math.isnan(m.eval_forward_seconds):
            stages = self.plan.stages[spec.run_id]
            evaluations = sum(math.ceil(s.steps / spec.eval_every) for s in stages if s.policy)
            self.evaluation += evaluations * task.spec.horizon * m.eval_forward_seconds
        elif spec.rollouts:
            self.eval_known = False

    def _add_stages(self, index: int) -> None:
        spec = self.plan.runs[index]
        task = self.plan.task_of(spec)
        label = display_label(spec.method, spec.config, self.plan.method_of(spec).cls.Config)
        for stage, identity in stage_identities(self.plan, index):
            work = self.works.setdefault(
                (label, stage.name, stage.steps),
                StageWork(spec.method, stage.name, stage.steps, stage.share is not None,
                          label=label),
            )  # fmt: skip
            work.runs += 1
            if identity is not None and identity in self.planned:
                continue
            work.trainings += 1  # shared: counted for the first run that needs it
            if identity is not None:
                self.planned.add(identity)
            if identity is not None and identity in self.cached:
                work.cached += 1
                continue
            k = self.stacked[index] if stage_stacks(stage, spec, task) else 1
            seconds = self.times.step_seconds(index, k, stage.name)
            if seconds is None:
                work.unknown = True
            else:
                work.compute += stage.steps * seconds

    def _add_side_stages(self, index: int, m: Measurement) -> None:
        """Note the stages the run trains outside its declared ones (``StagePlan.side_stage``,
        found by its measurement with the steps it asks): the same name, steps and FLOPs per
        step on one task is taken as one training, shared by every run that reaches it (as a
        shared initialisation is, through the stage cache)."""
        spec = self.plan.runs[index]
        for name, timing in m.stages.items():
            if timing.side_steps is None:
                continue
            flops = timing.flops_per_step
            identity = (spec.env, name, timing.side_steps,
                        None if flops is None else float(f"{flops:.3g}"))  # fmt: skip
            self.side.setdefault(identity, []).append((spec.method, timing.seconds_per_step))

    def side_works(self) -> list[StageWork]:
        """One row per side stage and step count: a training per identity (see
        :meth:`_add_side_stages`), each at the median of its runs' step times (the same
        training, measured or scaled for each method)."""
        trainings: dict[tuple[str, int], list[list[tuple[str, float]]]] = {}
        for (_, name, steps, _), found in self.side.items():
            trainings.setdefault((name, steps), []).append(found)
        rows = []
        for (name, steps), each in sorted(trainings.items()):
            runs = [run for found in each for run in found]
            compute = sum(steps * statistics.median(s for _, s in found) for found in each)
            rows.append(StageWork(",".join(sorted({method for method, _ in runs})), name, steps,
                                  True, len(runs), len(each), compute=compute,
                                  outside=True))  # fmt: skip
        return rows


def _named(works: Iterable[StageWork]) -> list[StageWork]:
    """The works, a method's config spelled out only where the sweep runs it with several
    (one config: the method's name says it, as the rest of the plan does)."""
    works = list(works)
    labels: dict[str, set[str]] = {}
    for w in works:
        labels.setdefault(w.method, set()).add(w.label)
    for w in works:
        if len(labels[w.method]) == 1:
            w.label = ""
    return works


def interpolate(
    n: int, lo: int, hi: int, at_lo: float, at_hi: float, knee: float | None = None
) -> float:
    """The step time at ``n`` labeled transitions from those measured at ``lo`` and ``hi``:
    linear from ``lo`` up to ``knee`` (default ``hi``) and flat after it (a full-batch
    stage's work grows with N_L; a minibatch one's grows up to its batch size, the knee, and
    stays), and beyond ``hi`` (a budget over MAX_LABELED) growing at the measured slope, if
    any, where the knee is ``hi`` (the stage still grew there)."""
    knee = hi if knee is None else min(max(knee, lo), hi)
    if knee <= lo:
        return at_hi if n >= hi else at_lo
    slope = (at_hi - at_lo) / (knee - lo)
    if n <= hi:
        return at_lo + slope * (min(max(n, lo), knee) - lo)
    return at_hi + (max(0.0, slope) if knee >= hi else 0.0) * (n - hi)


def _knee(span: tuple[int, int], ends: list, stage: str) -> float | None:
    """Where a stage's step stops growing with N_L, from its counted FLOPs at both ends of
    ``span``: a step's FLOPs grow as its batch, min(B, N_L) (or N_L at full batch), so B is
    about FLOPs(hi) / (FLOPs(lo) / lo) where lo is under B. Full batch, or grown more than
    half as much as N_L: ``hi``. Without counts: None (linear, as before counts)."""
    lo, hi = span
    flops = [m.stages[stage].flops_per_step for m in ends]
    if lo <= 0 or not all(flops):
        return None
    knee = flops[1] / (flops[0] / lo)
    return hi if knee >= 0.5 * hi else knee


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
        span = spans.get(span_key(plan, spec))
        for n in sorted(set(span)) if span else [None]:
            key = (SweepPlan.method_key(spec.method, spec.config), task.spec.obs_shape,
                   task.spec.num_actions, n)  # fmt: skip
            probed[key] = per_stage * sum(s.steps > 0 for s in plan.stages[spec.run_id])
    return pending, sum(probed.values())
