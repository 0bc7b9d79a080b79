"""``ssilbench eval`` as a library: a kept policy evaluated again, and filmed.

:func:`evaluate_kept` finds a run in the results store, loads the policy ``run
--keep-policy`` kept for it (:mod:`ssilbench.eval.kept`), rebuilds its task with the run's
environment options and scores the policy with the core's
:class:`~ssilbench.eval.rollout.Evaluator` as the run's final evaluation did: the same
protocol, the run's seed and the step of that evaluation, hence the same start states and
the same action-sampling generator. With the protocol's number of episodes, on the device
that trained it, a policy that draws its randomness from that generator alone (every
built-in method's: greedy, sampled, or a diffusion sampler's noise) scores what the store
records; on another device the arithmetic may round otherwise. ``episodes`` plays fewer
episodes: the first N of the protocol's start states where each sub-environment plays one
(``first_per_env``); with sampled actions the draws differ.
With a video folder, the first episodes are filmed (:mod:`ssilbench.eval.video`).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssilbench.errors import OutputError, UsageError, did_you_mean, os_error_message
from ssilbench.eval.kept import POLICIES, KeptPolicy, kept_run_ids, read_kept

if TYPE_CHECKING:
    from ssilbench.api import Task
    from ssilbench.plugins import Plugins
    from ssilbench.runs.records import RunRecord
    from ssilbench.runs.spec import RunSpec

MIN_PREFIX = 6  # a run id may be given by its first 6+ characters


@dataclass
class EvalReport:
    """What ``ssilbench eval`` found: the score now and the one recorded, the videos."""

    run_id: str
    label: str
    step: int
    episodes: int
    protocol_episodes: int
    score: float
    mean_return: float
    recorded_score: float | None
    metrics: dict[str, float] = field(default_factory=dict)
    videos: list[tuple[Path, int]] = field(default_factory=list)  # (file, frames)
    protocol_changed: bool = False

    def lines(self) -> list[str]:
        lines = [
            f"{self.run_id} ({self.label}), step {self.step}: score {self.score:.4g} "
            f"(mean return {self.mean_return:.4g}) over {self.episodes} episode(s)"
        ]
        if self.recorded_score is not None:
            same = self.episodes == self.protocol_episodes and not self.protocol_changed
            how = "" if same else f" (over the protocol's {self.protocol_episodes} episodes)"
            lines.append(f"  recorded final score: {self.recorded_score:.4g}{how}")
        if self.protocol_changed:
            lines.append("  note: the task's protocol differs from the run's (another plugin "
                         "version): scores may not compare.")  # fmt: skip
        if "success_rate" in self.metrics:
            lines.append(f"  success rate: {self.metrics['success_rate']:.4g}")
        lines += [f"  video: {path} ({frames} frames)" for path, frames in self.videos]
        return lines


def find_run(store_runs: dict[str, RunRecord], run_id: str, folder: Path) -> RunRecord:
    """The recorded run named by ``run_id`` (or a unique prefix of 6+ characters), or a
    UsageError with the closest run id and those that have a kept policy."""
    if run_id in store_runs:
        return store_runs[run_id]
    matches = [r for r in store_runs if len(run_id) >= MIN_PREFIX and r.startswith(run_id)]
    if len(matches) == 1:
        return store_runs[matches[0]]
    if len(matches) > 1:
        some = ", ".join(sorted(matches)[:5])
        raise UsageError(f"Run id prefix '{run_id}' matches {len(matches)} runs ({some}, ...): "
                         "give more characters.")  # fmt: skip
    kept = [r for r in kept_run_ids(folder) if r in store_runs]
    shown = ", ".join(f"{r} ({describe(store_runs[r])})" for r in kept[:10])
    listing = f" Runs with a kept policy: {shown}." if kept else (
        " No run of this store has a kept policy: run with --keep-policy.")  # fmt: skip
    raise UsageError(f"No run '{run_id}' in the results store {folder.parent}."
                     f"{did_you_mean(run_id, store_runs)}{listing}")  # fmt: skip


def describe(record: RunRecord) -> str:
    return f"{record.method_label} on {record.env_label}, N_L={record.budget}, seed {record.seed}"


def rerun_command(spec: RunSpec, results: Path) -> str:
    """The ``run`` command that trains ``spec`` again with its policy kept (into a new
    results folder: a run already recorded is skipped where it is recorded)."""
    return (f"ssilbench run --method {spec.method} --env {spec.env} --budgets {spec.budget} "
            f"--seeds {spec.seed} --steps {spec.steps} --keep-policy --results "
            f"{results}-kept")  # fmt: skip


def kept_policy_of(record: RunRecord, results: Path) -> KeptPolicy:
    """The kept policy of a recorded run, or a UsageError saying how to keep one."""
    folder = results / POLICIES
    kept = read_kept(folder, record.run_id)
    if kept is not None:
        return kept
    status = "" if record.status == "done" else f" (it is {record.status})"
    raise UsageError(
        f"Run {record.run_id} ({describe(record)}){status} has no kept policy in {folder}: "
        f"re-run it with --keep-policy, with the settings (-c/-o) it had, into a new results "
        f"folder (the same settings give the same run id): {rerun_command(record.spec, results)}"
        f", then 'ssilbench eval {record.run_id} --results {results}-kept'."
    )


def writable_folder(folder: Path) -> Path:
    """``folder`` made and proved writable, or an OutputError naming it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        message = os_error_message(folder, exc, "write videos into")
        raise OutputError(f"{message} Choose another --video DIR.") from None
    return folder


def run_task(plugins: Plugins, spec: RunSpec) -> Task:
    """The run's task, rebuilt from its environment and options (what planning does)."""
    from ssilbench.planning.values import validate_model
    from ssilbench.registry import split_env_id

    family, name = split_env_id(spec.env)
    environment = plugins.environments.create(family)
    options = validate_model(environment.Options, spec.options, f"options of '{family}'")
    task = environment.load(name, options)
    task.check_rollouts()
    return task


@dataclass(frozen=True)
class Filming:
    """Where and how ``eval`` films: ``count`` episodes into ``folder`` as ``fmt``."""

    folder: Path
    count: int = 1
    fmt: str = "auto"


def evaluate_kept(
    plugins: Plugins,
    results: Path,
    run_id: str,
    episodes: int | None = None,
    filming: Filming | None = None,
    device: str = "cpu",
) -> EvalReport:
    """Evaluate ``run_id``'s kept policy again (see the module's docstring); with
    ``filming``, write videos of its first episodes."""
    from ssilbench.eval.rollout import Evaluator
    from ssilbench.eval.video import FilmedVectorEnv, choose_format, write_video
    from ssilbench.runner.worker import resolve_device
    from ssilbench.runs.identity import protocol_fingerprint
    from ssilbench.runs.store import ResultsStore

    if episodes is not None and episodes < 1:
        raise UsageError(f"--episodes must be at least 1, got {episodes}.")
    with ResultsStore.open_read_only(results) as store:
        runs = {r.run_id: r for r in store.rows(status=None)}
    record = find_run(runs, run_id, results / POLICIES)
    kept = kept_policy_of(record, results)
    fmt = choose_format(filming.fmt) if filming is not None else None
    folder = writable_folder(filming.folder) if filming is not None else None
    task = run_task(plugins, record.spec)
    from ssilbench.eval.kept import load_policy

    torch_device = resolve_device(device)
    policy = load_policy(kept, torch_device)
    spec = task.spec
    count = episodes or spec.eval_episodes
    venv: Any = task.make_vec_env(count, seed=spec.eval_seed)
    if filming is not None:
        venv = FilmedVectorEnv(venv, task.frames, min(filming.count, count))
    evaluator = Evaluator(task, torch_device, run_seed=record.spec.seed, venv=venv)
    try:
        result = evaluator(policy, kept.step)
    finally:
        evaluator.close()
    changed = protocol_fingerprint(spec) != record.spec.protocol
    report = EvalReport(record.run_id, describe(record), kept.step, count, spec.eval_episodes,
                        result.score, result.mean_return, record.final_score, result.metrics,
                        protocol_changed=changed)  # fmt: skip
    if filming is not None and folder is not None and fmt is not None:
        if venv.missing or not venv.episodes:
            raise UsageError(f"{record.spec.env} draws no frames: its observations are not "
                             "images and its task does not implement Task.frames.")  # fmt: skip
        for index, frames in sorted(venv.episodes.items()):
            name = record.run_id if index == 0 else f"{record.run_id}-{index}"
            report.videos.append((write_video(frames, folder / name, fmt), len(frames)))
    return report
