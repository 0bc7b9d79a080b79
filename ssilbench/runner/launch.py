"""``ssilbench run`` as a library: plan a sweep from :class:`RunOptions`, then execute it
into the results store or preview its cost (a dry run).

:func:`prepare_run` is the one place that plans (from a sweep file or from the list flags),
resolves the device, chooses torch's thread count (:func:`choose_threads`) and makes the
executor; :func:`execute_run`, :func:`preview_run` and :func:`estimate_run` take what it
returns. Progress, summary lines and the question before a long sweep are the caller's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssilbench.errors import PreflightError, SsilbenchError
from ssilbench.planning.options import RunOptions

if TYPE_CHECKING:
    import torch

    from ssilbench.planning.plan import SweepPlan, TaskInfo
    from ssilbench.plugins import Plugins
    from ssilbench.runner.dryrun_report import DryRun
    from ssilbench.runner.sweep import SweepSummary
    from ssilbench.runner.timings import Timings
    from ssilbench.runs.spec import Sweep


SMALL_FLOPS = 10_000_000
"""A network that computes at most this many floating-point operations per sample in its
forward pass (counted over its linear and convolution layers) is small: one torch thread
per training process runs it fastest (measured: benchmarks/test_bench_threads.py)."""
LARGE_OBS = 4096
"""Where no network of the sweep can be counted (a unified architecture, a method without
architecture fields), observations of at least this many numbers count as large."""


@dataclass(frozen=True)
class ThreadChoice:
    """Torch intra-op threads of each process that trains the sweep's runs (this one, or
    each pool worker, Ray task or SLURM job), and why."""

    threads: int
    reason: str
    setting: str | int = "auto"

    def describe(self) -> str:
        return f"torch threads: {self.threads} per training process ({self.reason})"


@dataclass
class PreparedRun:
    """A planned sweep, ready to execute or preview."""

    options: RunOptions
    plan: SweepPlan
    sweeps: list[Sweep]
    results_dir: Path
    device: torch.device
    executor: Any  # RayExecutor | SlurmExecutor | None (this machine)
    threads: ThreadChoice | None = None  # None: torch's default left alone ("torch")


def plan_sweep(plugins: Plugins, options: RunOptions) -> tuple[SweepPlan, list[Sweep], Path]:
    """The checked plan of the sweep ``options`` describe, its sweeps and the results folder
    (made and proved writable unless this is a dry run, which writes nothing; removed again,
    while empty, when the sweep is refused). The sweep is resolved first, so that a mistake
    in it leaves nothing behind; the folder is checked next, before datasets are built
    (which may take long)."""
    from ssilbench.planning.plan import prepare, resolve_plan
    from ssilbench.planning.sweepfile import load_blocks, plan_blocks, prepare_blocks
    from ssilbench.runs.store import ensure_writable

    def results_dir() -> Path:
        return options.results if options.dry_run else ensure_writable(options.results)

    with _removed_if_refused(Path(options.results).expanduser()):
        if options.sweep_file is not None:
            path = options.sweep_file
            chosen = load_blocks(path, options.blocks)
            resolved, sweeps = plan_blocks(plugins, chosen, path, None, options.quick)
            folder = results_dir()
            plan = prepare_blocks(resolved, path, options.data_root, options.datasets)
            return plan, sweeps, folder
        sweep = options.sweep()
        resolved = resolve_plan(plugins, sweep)
        folder = results_dir()
        try:
            return prepare(resolved, options.data_root, options.datasets), [sweep], folder
        except PreflightError as exc:  # what planning chose for the user, then what is missing
            raise PreflightError(_noted(resolved.notes, exc), exc.problems) from None
        except SsilbenchError as exc:
            raise type(exc)(_noted(resolved.notes, exc)) from None


@contextmanager
def _removed_if_refused(folder: Path) -> Iterator[None]:
    """The folders made for a sweep's results are removed again, while still empty, when the
    sweep is refused (a dataset missing, say): a refused command leaves nothing behind."""
    made = [path for path in (folder, *folder.parents) if not path.exists()]
    try:
        yield
    except SsilbenchError:
        for path in made:  # the deepest first; one that is not empty keeps its parents
            try:
                path.rmdir()
            except OSError:
                break
        raise


def _noted(notes: list[str], exc: Exception) -> str:
    return "\n".join([*(f"{note}." for note in notes), str(exc)])


def prepare_run(plugins: Plugins, options: RunOptions) -> PreparedRun:
    """Plan the sweep, resolve the device (and torch's thread count) and make the executor;
    every mistake in the options raises an SsilbenchError here, before any run starts."""
    from ssilbench.runner.executors import make_executor
    from ssilbench.runner.worker import resolve_device

    plan, sweeps, results_dir = plan_sweep(plugins, options)
    device = resolve_device(options.device)
    executor = make_executor(options.executor, results_dir)
    choice = choose_threads(plan, plugins, options, device)
    if choice is not None:
        import torch

        # Set here too when workers train: this process then only writes the store, and the
        # device it records with each run ("cpu (x86_64, N threads)") is the workers'.
        torch.set_num_threads(choice.threads)
    return PreparedRun(options, plan, sweeps, results_dir, device, executor, choice)


def choose_threads(
    plan: SweepPlan, plugins: Plugins, options: RunOptions, device: torch.device
) -> ThreadChoice | None:
    """How many torch threads each training process gets (None: torch's default, left
    alone, for ``--threads torch`` in a single process).

    ``--threads N`` is N. ``auto`` (the default) is deterministic for a given sweep and
    machine, never the load, so a run id keeps its result (results are bit-identical for a
    fixed thread count): ``OMP_NUM_THREADS`` where it is set; else one thread when every
    network of the sweep is small (:data:`SMALL_FLOPS`) and training is on the CPU, where
    more threads only add synchronisation (5-7x slower on a busy 2-core machine); else the
    cores this process may use divided among the workers (on Ray or SLURM:
    ``--cpus-per-run``)."""
    setting = options.threads if options.threads is not None else "auto"
    remote = options.executor.kind != "local"
    pooled = remote or options.workers > 1
    if isinstance(setting, int):
        return ThreadChoice(setting, f"--threads {setting}", setting)
    if setting == "torch":
        # Workers have always taken one thread each; this process keeps torch's default.
        return ThreadChoice(1, "--threads torch: one per worker", setting) if pooled else None
    given = os.environ.get("OMP_NUM_THREADS", "").strip()
    if given.isdigit() and int(given) > 0:
        return ThreadChoice(int(given), "auto: OMP_NUM_THREADS is set")
    if remote:
        cores = max(1, int(options.executor.cpus_per_run or 1))
        share = f"--cpus-per-run {cores}"
    else:
        cores = max(1, _usable_cores() // options.workers)
        share = "all cores" if options.workers == 1 else f"cores / {options.workers} workers"
    if device.type != "cpu":
        return ThreadChoice(cores, f"auto: {share} (training on {device.type})")
    largest = _largest_network(plan, plugins)
    if largest is None:
        return ThreadChoice(cores, f"auto: {share} (no network could be sized)")
    flops, what, counted = largest
    size = f"{what}: {flops / 1e6:.3g} MFLOP per sample" if counted else what
    if flops <= SMALL_FLOPS:
        return ThreadChoice(1, f"auto: small networks, largest {size}")
    return ThreadChoice(cores, f"auto: {share}, the largest network {size}")


def _usable_cores() -> int:
    """The CPUs this process may run on (a SLURM or container CPU set, taskset)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def _largest_network(plan: SweepPlan, plugins: Plugins) -> tuple[float, str, bool] | None:
    """(forward FLOPs per sample, what, counted) of the sweep's largest network: each
    (method, task)'s architectures counted by :func:`forward_flops`. Where none can be
    counted, observations of LARGE_OBS numbers or more stand in for a large network
    (counted False)."""
    from ssilbench.planning.plan import architecture_names

    sizes: dict[tuple[str, tuple[int, ...], int], float | None] = {}
    best: tuple[float, str, bool] | None = None
    uncounted: list[TaskInfo] = []
    seen: set[tuple[int, int]] = set()
    for spec in plan.runs:
        method, task = plan.method_of(spec), plan.task_of(spec)
        if (id(method), id(task)) in seen:  # a sweep's runs share a few (method, task) pairs
            continue
        seen.add((id(method), id(task)))
        names = architecture_names(method, task.spec)
        counted = False
        for name in names:
            key = (name, tuple(task.spec.obs_shape), task.spec.num_actions)
            if key not in sizes:
                sizes[key] = forward_flops(plugins, name, task.spec.obs_shape,
                                           task.spec.num_actions)  # fmt: skip
            if sizes[key] is not None:
                counted = True
                if best is None or sizes[key] > best[0]:
                    best = (sizes[key], f"{name} on {task.env}", True)
        if not counted:
            uncounted.append(task)
    for task in uncounted:
        numbers = math.prod(task.spec.obs_shape)
        if numbers >= LARGE_OBS:
            return (math.inf, f"{task.env}'s observations ({numbers} numbers)", False)
    if best is None and uncounted:
        task = uncounted[0]
        return (0.0, f"{task.env}'s observations ({math.prod(task.spec.obs_shape)} numbers)",
                False)  # fmt: skip
    return best


def forward_flops(
    plugins: Plugins, name: str, obs_shape: tuple[int, ...], outputs: int
) -> float | None:
    """Floating-point operations of one sample's forward pass through the architecture
    ``name`` built for ``obs_shape`` (its linear and convolution layers: 2 per
    multiply-add), or None where it cannot be built and run alone (a unified architecture,
    an error). Torch's random state is left as it was, so planning changes no run."""
    import torch
    from torch import nn

    try:
        arch = plugins.architectures.load(name)
        if arch.unified:
            return None
        total = 0

        def count(module: nn.Module, inputs: Any, output: Any) -> None:
            nonlocal total
            if isinstance(module, nn.Linear):
                total += 2 * module.in_features * module.out_features * (
                    output.numel() // output.shape[-1])  # fmt: skip
            elif isinstance(module, nn.Conv1d | nn.Conv2d | nn.Conv3d):
                total += 2 * module.weight[0].numel() * output.numel()

        with torch.random.fork_rng(devices=[]), torch.no_grad():
            net = arch().build(tuple(obs_shape), outputs)
            hooks = [m.register_forward_hook(count) for m in net.modules()]
            net.eval()(torch.zeros(1, *obs_shape))
            for hook in hooks:
                hook.remove()
        return float(total)
    except Exception:  # noqa: BLE001 - any failure means "cannot size it", not an error
        return None


def execute_run(
    prepared: PreparedRun,
    plugins: Plugins,
    plugin_flags: tuple[str, ...],
    on_progress: Callable[[str, str], None] | None = None,
) -> SweepSummary:
    """Execute the runs not recorded yet into the results store; ``plugin_flags`` let worker
    processes load the same plugins, ``on_progress(event, text)`` follows the sweep."""
    from ssilbench.eval.kept import POLICIES
    from ssilbench.runner.sweep import PoolSetup, run_sweep
    from ssilbench.runner.worker import RunStorage
    from ssilbench.runs.store import ResultsStore
    from ssilbench.train.checkpoint import CHECKPOINTS

    options, results_dir = prepared.options, prepared.results_dir
    storage = RunStorage(
        cache_root=results_dir / "cache" if options.cache else None,
        checkpoint_root=results_dir / CHECKPOINTS,
        checkpoint_every=options.checkpoint_every or 0,
        policy_root=results_dir / POLICIES if options.keep_policy else None,
    )
    threads = prepared.threads.threads if prepared.threads is not None else 1
    setup = PoolSetup(plugin_flags=plugin_flags, data_root=options.data_root,
                      device=str(prepared.device), storage=storage, threads=threads)  # fmt: skip
    with ResultsStore(results_dir) as store:
        return run_sweep(prepared.plan, plugins, store, prepared.device, options.retry_failed,
                         on_progress, options.workers, setup, options.stack, storage,
                         prepared.executor)  # fmt: skip


def preview_run(
    prepared: PreparedRun,
    plugins: Plugins,
    log: Callable[[str], None] = lambda message: None,
    measure_missing: bool = True,
    count_flops: bool = True,
) -> tuple[DryRun, Timings]:
    """The stage plan and estimated compute of the runs a sweep would execute, and the step
    times behind the estimate (measured now where none were kept and ``measure_missing``;
    see :func:`save_timings`; scaled from FLOPs counted now with ``count_flops``). Nothing
    is claimed, trained or written."""
    from ssilbench.runner.dryrun import DryRunSettings, dry_run
    from ssilbench.runner.timings import FILE, Timings
    from ssilbench.runner.workload import recorded

    options, results_dir = prepared.options, prepared.results_dir
    done = recorded(prepared.plan, results_dir, options.retry_failed)
    timings = Timings(results_dir / FILE)
    settings = DryRunSettings(
        workers=options.workers,
        stack=options.stack,
        executor=prepared.executor is not None,
        cache_root=results_dir / "cache" if options.cache else None,
        measure_missing=measure_missing,
        count_flops=count_flops,
        remeasure=options.remeasure,
        steps=PLAN_STEPS if options.save_timings else PROBE_STEPS,
    )
    report = dry_run(prepared.plan, plugins, prepared.device, timings, done, settings, log)
    return report, timings


CONFIRM_OVER_S = 300.0
"""A sweep estimated to take longer than this (wall time) asks before it starts in a
terminal (``--yes`` skips the question)."""
PROBE_SHARE = 0.05
"""Step times are measured for the estimate only when the measurement's steps are at most
this share of the steps the sweep trains: the estimate stays cheap next to the sweep."""
PROBE_STEPS = 4  # steps of each stage a measurement trains (runner/timings.py: measure)
PLAN_STEPS = 12
"""Steps of each stage that ``ssilbench plan`` measures: asked for, it can afford a median
over more steps, which a passing load spike moves less."""


def estimate_run(
    prepared: PreparedRun,
    plugins: Plugins,
    measure: bool,
    log: Callable[[str], None] = lambda message: None,
) -> DryRun | None:
    """The cost of the runs the sweep will execute (the dry run's estimate), from the step
    times kept in RESULTS/timings.json and, with ``measure``, those measured now and kept
    there for the next time, unless measuring would cost more than :data:`PROBE_SHARE` of
    the sweep's steps. None when no estimate can be made that cheaply."""
    from ssilbench.runner.dryrun import probe_steps

    if measure:
        pending, probe = probe_steps(prepared.plan, prepared.results_dir, PROBE_STEPS,
                                     prepared.options.retry_failed)  # fmt: skip
        measure = probe <= PROBE_SHARE * pending
    with _random_state_kept(prepared.device):
        # A batch job neither measures nor counts FLOPs before it starts (minutes at the
        # paper's sizes): its estimate is made of what is kept or shipped.
        report, timings = preview_run(prepared, plugins, log, measure_missing=measure,
                                      count_flops=measure)  # fmt: skip
    if measure and timings.items:
        save_timings(timings, prepared.results_dir)
    return report if report.wall_seconds is not None else None


@contextmanager
def _random_state_kept(device: torch.device) -> Iterator[None]:
    """Measuring step times trains methods for a few steps in this process; the global
    random states (torch's, NumPy's, Python's) are put back afterwards, so that the runs
    that follow in this process are the same with or without an estimate first."""
    import random

    import numpy as np
    import torch

    devices = [device.index or 0] if device.type == "cuda" else []
    python, numpy = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(python)
        np.random.set_state(numpy)


def save_timings(timings: Timings, results_dir: Path) -> None:
    """Keep measured step times in the results folder for later plans."""
    from ssilbench.runs.store import ensure_writable

    ensure_writable(results_dir)
    timings.save()
