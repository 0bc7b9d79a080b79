"""Execute one run: split the data, fit the method stage by stage, evaluate, return an outcome."""

from __future__ import annotations

import contextlib
import math
import platform
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

import ssilbench
from ssilbench.api import Policy, RunContext, Stage, VideoModel
from ssilbench.data.split import LabeledView, UnlabeledView, split
from ssilbench.errors import UsageError
from ssilbench.eval.kept import keep_policy
from ssilbench.eval.overlap import OverlappedEvaluation
from ssilbench.eval.rollout import Evaluator
from ssilbench.planning.plan import MethodInfo, SweepPlan, TaskInfo, architecture_names
from ssilbench.plugins import Plugins
from ssilbench.runner.telemetry import RunTelemetry, current_sink
from ssilbench.runs.identity import dataset_origin
from ssilbench.runs.records import RunOutcome
from ssilbench.runs.spec import RunSpec
from ssilbench.stages import StagePlan, check_stages
from ssilbench.train.checkpoint import RunCheckpoints
from ssilbench.train.loop import seed_everything, stopping_rule
from ssilbench.train.memo import StageCache


def resolve_device(name: str) -> torch.device:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``; a device this machine lacks is a user error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"Unknown device {name!r}: use auto, cpu, cuda or cuda:N.") from None
    if device.type == "cuda" and (
        not torch.cuda.is_available() or (device.index or 0) >= torch.cuda.device_count()
    ):
        raise UsageError(f"Device {name!r} is not available here: use --device cpu or auto.")
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"Device {name!r} is not supported: use auto, cpu, cuda or cuda:N.")
    return device


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


def versions(plugins: Plugins) -> dict[str, Any]:
    return {
        "ssilbench": ssilbench.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "plugins": plugins.versions(),
        "git": _git_revision(),
    }


def setup_provenance(task: TaskInfo, data_root: Path | None) -> dict[str, Any]:
    """What a run's record keeps, beside the versions, for a leaderboard to say what its
    numbers stand on: ``dataset`` (:func:`ssilbench.runs.identity.dataset_origin`) and
    ``protocol``, the task's default steps and its family's paper protocol (None where the
    family declares none). Neither enters the run's identity."""
    out: dict[str, Any] = {}
    if task.dataset is not None:
        out["dataset"] = dataset_origin(task.dataset, data_root)
    paper = task.environment.paper_protocol if task.environment is not None else None
    out["protocol"] = {
        "default_steps": task.spec.default_steps,
        "paper": None if paper is None else {
            "figure": paper.figure, "budgets": list(paper.budgets), "seeds": list(paper.seeds),
            "steps": paper.steps or task.spec.default_steps},
    }  # fmt: skip
    return out


def _git_revision() -> str | None:
    source = Path(ssilbench.__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@dataclass(frozen=True)
class RunStorage:
    """Where runs keep what outlives one process: reusable trained stages
    (``cache_root``), training checkpoints (``checkpoint_root``, every
    ``checkpoint_every`` steps; 0 = none) and, where ``policy_root`` is set, each finished
    run's final policy (``ssilbench.eval.kept``)."""

    cache_root: Path | None = None
    checkpoint_root: Path | None = None
    checkpoint_every: int = 0
    policy_root: Path | None = None

    def cache(self, code: dict[str, str] | None = None) -> StageCache | None:
        """The stage cache of a run whose architectures' plugins have the code ``code``
        (plugin -> fingerprint, from ``RunSpec.code``)."""
        return StageCache(self.cache_root, code) if self.cache_root is not None else None

    def checkpoints(
        self, run_id: str, timeline: list, device: str | None = None
    ) -> RunCheckpoints | None:
        """The run's checkpoints (None when none are kept); ``device``: where this attempt
        trains, as the run records it."""
        if self.checkpoint_root is None or self.checkpoint_every < 1:
            return None
        return RunCheckpoints(
            self.checkpoint_root / run_id, self.checkpoint_every, timeline, device
        )


@dataclass
class PreparedRun:
    """One run's context, evaluator and timeline, ready for its method to fit."""

    spec: RunSpec
    method: MethodInfo
    ctx: RunContext
    evaluator: Evaluator
    timeline: list[dict[str, Any]] = field(default_factory=list)
    overlapped: OverlappedEvaluation | None = None
    telemetry: RunTelemetry | None = None
    keep: Callable[[Policy, int], Any] | None = None  # stores the final policy (its step)

    def abort(self) -> None:
        """Release the evaluator after a failed fit (an evaluation in flight ends first; the
        fit's own error is the one that propagates)."""
        try:
            if self.overlapped is not None:
                with contextlib.suppress(Exception):  # secondary to the error being raised
                    self.overlapped.close()
        finally:
            self.evaluator.close()


def stage_scope(spec: RunSpec, task: TaskInfo) -> dict[str, Any]:
    """The run's place among runs that may share stages (``StagePlan.scope``)."""
    data = task.dataset.content_id() if task.dataset is not None else None
    return {"env": SweepPlan.task_key(spec), "data": data, "seed": spec.seed, "budget": spec.budget}


@dataclass(frozen=True)
class RunInputs:
    """What a method fits a run from, besides the run's plan: the split of the data for the
    run's budget and seed, the task's video model, and the stages the method declares."""

    labeled: LabeledView
    unlabeled: UnlabeledView
    video_model: VideoModel | None
    stages: list[Stage]

    @classmethod
    def declare(
        cls, method: MethodInfo, task: TaskInfo, store, budget: str, seed: int, steps: int
    ) -> RunInputs:
        labeled, unlabeled = split(store, budget, seed, task.spec.budget_unit)
        video_model = task.task.video_model()
        stages = method.cls().stages(method.config, steps, task.spec, video_model is not None)
        return cls(labeled, unlabeled, video_model, stages)

    def context(
        self,
        method: MethodInfo,
        task: TaskInfo,
        plugins: Plugins,
        device: torch.device,
        seed: int,
        plan: StagePlan,
        **more: Any,
    ) -> RunContext:
        """The run's context, with ``plan`` made of :attr:`stages` (the context evaluates a
        policy as the plan does); ``more``: its other fields (``stopping``, ``log``)."""
        return RunContext(
            config=method.config,
            spec=task.spec,
            architectures=plugins.architectures.create,
            labeled=self.labeled,
            unlabeled=self.unlabeled,
            video_model=self.video_model,
            device=device,
            seed=seed,
            plan=plan,
            evaluate=plan.evaluate,
            **more,
        )


def set_up_run(
    spec: RunSpec,
    method: MethodInfo,
    task: TaskInfo,
    plugins: Plugins,
    device: torch.device,
    storage: RunStorage | None = None,
    overlap_eval: bool | None = None,
) -> PreparedRun:
    """Split the data, declare and check the stages, and build the run's context.

    ``overlap_eval``: evaluate in a background thread while training goes on (None: on CUDA
    devices, where it hides the rollouts' CPU time)."""
    seed_everything(spec.seed)
    telemetry = RunTelemetry(spec.run_id, spec.steps, current_sink())
    telemetry.phase("preparing data")
    inputs = RunInputs.declare(method, task, task.dataset, spec.budget, spec.seed, spec.steps)
    check_stages(inputs.stages, spec.steps, spec.method)
    timeline: list[dict[str, Any]] = []
    evaluator = Evaluator(task.task, device, rollouts=spec.rollouts, run_seed=spec.seed)
    stage_at: dict[int, str] = {}  # the stage open when an evaluation was asked for

    def record(policy, step: int) -> float:
        telemetry.phase("evaluating", stage_at.get(step, telemetry.stage))
        result = evaluator(policy, step)
        entry = {
            "step": step,
            "score": None if math.isnan(result.score) else result.score,
            "return": None if math.isnan(result.mean_return) else result.mean_return,
            **result.metrics,
        }
        timeline.append(entry)
        telemetry.evaluation(stage_at.pop(step, telemetry.stage), step, entry)
        return result.score

    # On a GPU, rollouts (CPU work) overlap with training; see ssilbench.eval.overlap.
    if overlap_eval is None:
        overlap_eval = device.type == "cuda" and spec.rollouts
    overlapped = OverlappedEvaluation(record, device) if overlap_eval else None

    def evaluate(policy) -> float:
        """The score now, or NaN when the evaluation runs in the background."""
        stage_at[plan.global_step] = open_stage(plan)
        if overlapped is None:
            return record(policy, plan.global_step)
        overlapped.submit(policy, plan.global_step)
        return float("nan")

    storage = storage or RunStorage()
    plan = StagePlan(
        inputs.stages,
        eval_every=spec.eval_every,
        evaluate=evaluate,
        cache=storage.cache(architectures_code(plugins, spec, method, task)),
        checkpoints=storage.checkpoints(spec.run_id, timeline, describe_device(device)),
        scope=stage_scope(spec, task),
        telemetry=telemetry,
    )
    if plan.cache is not None:  # labelling and waiting for a shared stage are said as phases
        plan.cache.on_phase = telemetry.phase
    if overlapped is not None and plan.checkpoints is not None:
        plan.checkpoints.before_save = overlapped.wait  # a checkpoint holds every evaluation
    stopping = stopping_rule(spec.stop_early)

    def log_metric(name: str, value: float, step: int | None) -> None:
        telemetry.metric(open_stage(plan), name, plan.global_step if step is None else step,
                         value)  # fmt: skip

    ctx = inputs.context(method, task, plugins, device, spec.seed, plan, stopping=stopping,
                         metrics=log_metric)  # fmt: skip
    keep = None
    if storage.policy_root is not None:
        plugin = plugins.methods.entries[spec.method].origin.plugin
        keep = partial(keep_policy, storage.policy_root, spec.run_id, spec.document(),
                       plugin=plugin)  # fmt: skip
    return PreparedRun(spec, method, ctx, evaluator, timeline, overlapped, telemetry, keep)


def architectures_code(
    plugins: Plugins, spec: RunSpec, method: MethodInfo, task: TaskInfo
) -> dict[str, str]:
    """Plugin -> code fingerprint (``spec.code``) of the plugins whose architectures the
    run's config names: the code that builds its networks, which its stage keys hold."""
    entries = plugins.architectures.entries
    used = {entries[n].origin.plugin for n in architecture_names(method, task.spec) if n in entries}
    return {p: c for p, c in spec.code.items() if p in used}


def open_stage(plan: StagePlan) -> str:
    """The name of the stage opened last (the one training now), or "run" before any."""
    return next(reversed(plan.budgets), "run")


def finish(run: PreparedRun, policy) -> RunOutcome:
    """Check the step accounting, make sure the final policy is evaluated, summarise."""
    try:
        report = run.ctx.plan.check_spent()
        if run.overlapped is not None:
            run.overlapped.wait()
        if not run.timeline or run.timeline[-1]["step"] != run.ctx.plan.global_step:
            run.ctx.evaluate(policy)
    finally:
        if run.overlapped is not None:
            run.overlapped.close()
        run.evaluator.close()
    earlier = 0.0
    if run.ctx.plan.checkpoints is not None:
        earlier = run.ctx.plan.checkpoints.earlier
        run.ctx.plan.checkpoints.clear()  # the run is complete: nothing to resume
    env_spec = run.ctx.spec
    final = run.timeline[-1]
    if run.keep is not None:  # the policy its final evaluation scored, for ssilbench eval
        run.keep(policy, final["step"])
    curves: list[dict[str, Any]] = []
    if run.telemetry is not None:
        run.telemetry.finished()
        curves = run.telemetry.curves()
    scores = [e["score"] for e in run.timeline if e["score"] is not None]
    final_score = final["score"]
    max_score = max(scores) if scores else None
    return RunOutcome(
        n_labeled=len(run.ctx.labeled),
        score=final_score if env_spec.report == "final" else max_score,
        final_score=final_score,
        max_score=max_score,
        report=env_spec.report,
        normaliser=env_spec.normaliser.model_dump(),
        timeline=run.timeline,
        metrics={
            **{k: v for k, v in final.items() if k not in ("step", "score") and v is not None},
            **_demonstrations(run.ctx),
        },
        stages=report,
        curves=curves,
        earlier_seconds=earlier,
    )


def _demonstrations(ctx) -> dict[str, int]:
    """Where N_L counts whole demonstrations, how many the run's D_L holds (the leaderboard
    labels such budgets as demonstrations)."""
    if ctx.spec.budget_unit != "demonstrations" or ctx.labeled.episode_ends is None:
        return {}
    episodes = np.searchsorted(ctx.labeled.episode_ends, ctx.labeled.index, side="right")
    return {"labeled_demonstrations": len(np.unique(episodes))}


def execute(
    spec: RunSpec,
    method: MethodInfo,
    task: TaskInfo,
    plugins: Plugins,
    device: torch.device,
    storage: RunStorage | None = None,
    overlap_eval: bool | None = None,
) -> RunOutcome:
    """Train and evaluate one run. Exceptions propagate: the sweep records them as failures."""
    run = set_up_run(spec, method, task, plugins, device, storage, overlap_eval)
    [outcome] = _fit_and_finish([run], lambda ctxs: [method.cls().fit(ctxs[0])])
    return outcome


def execute_many(
    specs: list[RunSpec],
    method: MethodInfo,
    task: TaskInfo | list[TaskInfo],
    plugins: Plugins,
    device: torch.device,
    storage: RunStorage | None = None,
    overlap_eval: bool | None = None,
) -> list[RunOutcome]:
    """Runs of one method and task that differ only in budget and seed, fitted together
    through the method's ``fit_many`` (one stacked computation). ``task``: the runs' task,
    or each run's where options follow the seed (each seed's dataset, one setup)."""
    tasks = task if isinstance(task, list) else [task] * len(specs)
    runs = [
        set_up_run(spec, method, t, plugins, device, storage, overlap_eval)
        for spec, t in zip(specs, tasks, strict=True)
    ]
    for run in runs:
        if run.ctx.plan.checkpoints is not None:
            run.ctx.plan.checkpoints.share = len(runs)
    return _fit_and_finish(runs, method.cls().fit_many)


def _fit_and_finish(
    runs: list[PreparedRun], fit: Callable[[list[RunContext]], list[Policy]]
) -> list[RunOutcome]:
    """The runs' policies from ``fit`` (every run released when it fails), each finished."""
    try:
        policies = fit([run.ctx for run in runs])
    except BaseException:
        for run in runs:
            run.abort()
        raise
    return [finish(run, policy) for run, policy in zip(runs, policies, strict=True)]
