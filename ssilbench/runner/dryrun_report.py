"""A dry run's findings and their text: the runs a sweep would train, the stages it trains
(shared, cached), the step times behind the estimate (measured when, at what load) and what
it costs. :mod:`ssilbench.runner.dryrun` finds them.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from ssilbench.data.datasets import DatasetNotBuilt
from ssilbench.planning.plan import SweepPlan
from ssilbench.planning.problems import Problem, dataset_problem_lines
from ssilbench.runner.timings import Measurement
from ssilbench.runner.workload import StageWork, labeled_transitions

LONG_ON_CPU_S = 3600.0
"""A sweep estimated to take longer than this on a CPU gets the settings that would fit."""


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
    shipped: set[str] = field(default_factory=set)
    """The keys of the measurements taken from the step times shipped with ssilbench."""

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
        lines += self._stage_lines()
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
        lines += self._stopping_early()
        lines += self._outside_stages()
        lines += self._smaller_here()
        unmeasured = sorted({name for name, m in self.measurements.values() if m is None})
        if unmeasured:
            lines.append(
                f"No step times kept or shipped for this device for: {', '.join(unmeasured)} "
                "(add --measure to measure them here, 'k of n', and keep them)."
            )
        elif self.measurements:
            lines.append(
                "Step times (the steady state of a few steps of "
                "each stage on a small store of the task's shape)" + self._when() + "."
            )
            labeled = sorted({m.labeled for _, m in self.measurements.values()
                              if m is not None and m.labeled is not None})  # fmt: skip
            if labeled:
                lines.append(
                    "Each method and task is priced at the smallest and largest of its "
                    "runs' label budgets ("
                    + ", ".join(f"{n:,}" for n in labeled)
                    + " labeled transitions), and a run's step time is interpolated "
                    "linearly between (up to a minibatch stage's batch size, flat after)."
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

    def _unsized(self) -> list[str]:
        """Runs whose label budget is a fraction of a dataset not built yet: not a count
        until it is, so they are priced alone at a sample label count."""
        runs = [self.plan.runs[i] for i in self.pending]
        unsized = sum(1 for spec in runs if self.plan.task_of(spec).dataset is None
                      and labeled_transitions(self.plan, spec) is None)  # fmt: skip
        if not unsized:
            return []
        return [
            f"{unsized} of the runs to train take a fraction of such a dataset as their label "
            "budget, not a count until it is built: they are priced alone, at a sample label "
            "count, which can be far from their cost. 'ssilbench data build' (--sweep FILE "
            "for a sweep file's) builds the datasets; a plan after it prices the runs at "
            "their sizes."
        ]

    def _stage_lines(self) -> list[str]:
        """The table of the stages to train, with what its marks mean."""
        if not self.works:
            return []
        lines = ["", "Stages to train:", _table(self.works)]
        if any(w.shared for w in self.works):
            lines.append(
                "  * shared: trained once for every run that needs it (by the "
                "first of them), or taken from the stage cache"
            )
        outside = sorted({w.stage for w in self.works if w.outside})
        if outside:
            lines.append(
                f"  * {', '.join(outside)}: trained outside the declared stages (a shared "
                "initialisation), once per task for every method, budget and seed that "
                "reaches it, at the median of their step times; not looked up in the "
                "stage cache"
            )
        return lines

    def _stopping_early(self) -> list[str]:
        """Runs that may stop before their steps: the estimate is their upper bound."""
        early = sum(1 for i in self.pending if self.plan.runs[i].stop_early)
        if not early:
            return []
        return [
            f"{early} of the {len(self.pending)} runs to train may stop a stage early once "
            "its training has converged (--stop-early): the estimate counts every step, an "
            "upper bound for them."
        ]

    def _outside_stages(self) -> list[str]:
        """Training that a measurement timed outside the declared stages (a shared
        initialisation, ``StagePlan.side_stage``) without the steps it asks (kept before
        they were recorded): not in the estimate, and said so."""
        declared = {(w.method, w.stage) for w in self.works}
        found: dict[tuple[str, str], float] = {}
        for method, m in self.measurements.values():
            for name, timing in (m.stages if m is not None else {}).items():
                if (method, name) not in declared and timing.side_steps is None:
                    found.setdefault((method, name), timing.seconds_per_step)
        if not found:
            return []
        listed = ", ".join(f"{method} {name} ({seconds:.4g} s/step)"
                           for (method, name), seconds in sorted(found.items()))  # fmt: skip
        return [
            f"Not in the estimate: {listed}. These train outside the declared stages, once "
            "for the runs of a task that share them (later runs reuse them from the stage "
            "cache); their steps are a setting of the method or architecture (its card)."
        ]

    def _smaller_here(self) -> list[str]:
        """On a CPU, for a sweep estimated over LONG_ON_CPU_S of wall time: the settings
        that make a version of it that fits (tried before a GPU runs the whole)."""
        wall = self.wall_seconds
        if not self.device.startswith("cpu") or wall is None or wall <= LONG_ON_CPU_S:
            return []
        envs = sorted({spec.env for spec in self.plan.runs})
        fewer = f"--env {envs[0]}" if len(envs) > 1 else "fewer label budgets or seeds"
        return [
            f"On this CPU that is about {_hours(wall)}. To try the sweep here first: "
            "--steps-scale 0.1 (a tenth of every stage's steps), " + fewer + ", smaller "
            "networks with -c (each method's card lists its sizes; a paper sweep file's "
            "--quick block chooses them), or --device cuda where there is a GPU."
        ]

    def _when(self) -> str:
        """When and at what load the step times were measured: now, or kept from earlier
        plans (the oldest), with how to measure them again."""
        found = {key: m for key, (_, m) in self.measurements.items() if m is not None}
        parts = []
        now = [m for key, m in found.items() if key in self.measured_now]
        shipped = [m for key, m in found.items() if key in self.shipped and not m.scaled_from]
        scaled = [m for key, m in found.items() if key in self.shipped and m.scaled_from]
        kept = [m for key, m in found.items() if key not in self.measured_now | self.shipped]
        if now:
            parts.append("now" + _at_load(now))
        if shipped:
            devices = ", ".join(sorted({m.device for m in shipped}))
            parts.append(f"{len(shipped)} shipped with ssilbench, measured on {devices}"
                         f"{_at_load(shipped)} ('ssilbench plan --remeasure' measures them "
                         "here)")  # fmt: skip
        if scaled:
            parts.append(_scaled_line(scaled))
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
        built = Counter(t.env for t in absent if isinstance(t.unavailable, DatasetNotBuilt))
        lines = []
        if built:
            # One task may need several datasets (other options, or a dataset per seed).
            names = [env if n == 1 else f"{env} ({n} datasets)" for env, n in sorted(built.items())]
            lines.append(f"Datasets a run builds first: {', '.join(names)}.")
            lines += self._unsized()
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


def _scaled_line(scaled: list[Measurement]) -> str:
    """Which step times were scaled by counted FLOPs, and from which measured entries."""
    sources = _in_groups({key for m in scaled for key in m.scaled_from or ()})
    targets = _in_groups({m.key for m in scaled})
    return (f"{len(scaled)} scaled by counted FLOPs (no entry of their own: "
            f"{', '.join(targets)}) from the seconds per FLOP of shipped measurements "
            f"({', '.join(sources)}), none below the fastest step measured, rough: a CPU "
            "computes small and large networks at different rates (docs/guide.md, 'Before "
            "a sweep', gives the error; --measure measures them here)")  # fmt: skip


def _in_groups(keys: set[str]) -> list[str]:
    """Step-time keys in a few words, those of one method and size together where there are
    more than three (a sweep over label budgets and stackings has dozens)."""
    groups: dict[str, list[str]] = {}
    for key in keys:
        fields = json.loads(key)
        groups.setdefault(key_words(json.dumps({**fields, "labeled": None, "stacked": None})),
                          []).append(key)  # fmt: skip
    words = []
    for name, each in groups.items():
        if len(each) > 3:
            words.append(f"{name} ({len(each)} label counts and stackings)")
        else:
            words += [key_words(key) for key in each]
    return sorted(words)


def key_words(key: str) -> str:
    """A step-time key in a few words: method, architecture or size, label count."""
    fields = json.loads(key)
    config = fields.get("config", {})
    size = config.get("arch") or config.get("size") or "default"
    labeled = fields.get("labeled")
    stacked = f" x{fields['stacked']} stacked" if fields.get("stacked") else ""
    return (f"{fields['method']} {size}" + (f" N_L={labeled:,}" if labeled is not None else "")
            + stacked)  # fmt: skip


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
    low, high = f"{min(loads):.1f}", f"{max(loads):.1f}"
    return f", at load {low}" if low == high else f", at load {low}-{high}"


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
                w.shown,
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
