"""``ssilbench run`` as a library: plan a sweep from :class:`RunOptions`, then execute it
into the results store or preview its cost (a dry run).

:func:`prepare_run` is the one place that plans (from a sweep file or from the list flags),
resolves the device and makes the executor; :func:`execute_run` and :func:`preview_run`
take what it returns. Progress and summary lines are the caller's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssilbench.errors import SsilbenchError
from ssilbench.runner.run_options import RunOptions

if TYPE_CHECKING:
    import torch

    from ssilbench.plugins import Plugins
    from ssilbench.runner.dryrun import DryRun
    from ssilbench.runner.plan import SweepPlan
    from ssilbench.runner.spec import Sweep
    from ssilbench.runner.sweep import SweepSummary
    from ssilbench.runner.timings import Timings


@dataclass
class PreparedRun:
    """A planned sweep, ready to execute or preview."""

    options: RunOptions
    plan: SweepPlan
    sweeps: list[Sweep]
    results_dir: Path
    device: torch.device
    executor: Any  # RayExecutor | SlurmExecutor | None (this machine)


def plan_sweep(plugins: Plugins, options: RunOptions) -> tuple[SweepPlan, list[Sweep], Path]:
    """The checked plan of the sweep ``options`` describe, its sweeps and the results folder
    (made and proved writable unless this is a dry run, which writes nothing). The sweep is
    resolved first, so that a mistake in it leaves nothing behind; the folder is checked
    next, before datasets are built (which may take long)."""
    from ssilbench.runner.plan import prepare, resolve_plan
    from ssilbench.runner.results_db import ensure_writable
    from ssilbench.runner.sweepfile import load_sweep_file, plan_blocks, select_blocks

    def results_dir() -> Path:
        return options.results if options.dry_run else ensure_writable(options.results)

    if options.sweep_file is not None:
        path = options.sweep_file
        chosen = select_blocks(load_sweep_file(path), path, options.block_names())
        resolved, sweeps = plan_blocks(plugins, chosen, path, None, options.quick)
        folder = results_dir()
        try:
            plan = prepare(resolved, options.data_root, options.datasets)
        except SsilbenchError as exc:
            raise type(exc)(f"Sweep file {path}: {exc}") from None
        return plan, sweeps, folder
    sweep = options.sweep()
    resolved = resolve_plan(plugins, sweep)
    folder = results_dir()
    return prepare(resolved, options.data_root, options.datasets), [sweep], folder


def prepare_run(plugins: Plugins, options: RunOptions) -> PreparedRun:
    """Plan the sweep, resolve the device (and torch's thread count) and make the executor;
    every mistake in the options raises an SsilbenchError here, before any run starts."""
    from ssilbench.runner.executors import make_executor
    from ssilbench.runner.worker import resolve_device

    plan, sweeps, results_dir = plan_sweep(plugins, options)
    device = resolve_device(options.device)
    if options.threads is not None:
        import torch

        torch.set_num_threads(options.threads)
    executor = make_executor(options.executor, results_dir)
    return PreparedRun(options, plan, sweeps, results_dir, device, executor)


def execute_run(
    prepared: PreparedRun,
    plugins: Plugins,
    plugin_flags: tuple[str, ...],
    on_progress: Callable[[str, str], None] | None = None,
) -> SweepSummary:
    """Execute the runs not recorded yet into the results store; ``plugin_flags`` let worker
    processes load the same plugins, ``on_progress(event, text)`` follows the sweep."""
    from ssilbench.runner.results_db import ResultsStore
    from ssilbench.runner.sweep import PoolSetup, run_sweep
    from ssilbench.runner.worker import RunStorage

    options, results_dir = prepared.options, prepared.results_dir
    storage = RunStorage(
        cache_root=results_dir / "cache" if options.cache else None,
        checkpoint_root=results_dir / "checkpoints",
        checkpoint_every=options.checkpoint_every or 0,
    )
    setup = PoolSetup(plugin_flags=plugin_flags, data_root=options.data_root,
                      device=str(prepared.device), storage=storage)  # fmt: skip
    with ResultsStore(results_dir) as store:
        return run_sweep(prepared.plan, plugins, store, prepared.device, options.retry_failed,
                         on_progress, options.workers, setup, options.stack, storage,
                         prepared.executor)  # fmt: skip


def preview_run(
    prepared: PreparedRun, plugins: Plugins, log: Callable[[str], None] = lambda message: None
) -> tuple[DryRun, Timings]:
    """The stage plan and estimated compute of the runs a sweep would execute, and the step
    times behind the estimate (measured now where none were kept; see :func:`save_timings`).
    Nothing is claimed, trained or written."""
    from ssilbench.runner.dryrun import dry_run
    from ssilbench.runner.results_db import read_statuses
    from ssilbench.runner.timings import FILE, Timings

    options, results_dir = prepared.options, prepared.results_dir
    # What the sweep would skip: done runs, and failed ones unless they are to be retried.
    skipped = ("done",) if options.retry_failed else ("done", "failed")
    done = {run_id for run_id, status in read_statuses(results_dir).items() if status in skipped}
    timings = Timings(results_dir / FILE)
    cache_root = results_dir / "cache" if options.cache else None
    report = dry_run(prepared.plan, plugins, prepared.device, done, cache_root, timings,
                     workers=options.workers, log=log)  # fmt: skip
    return report, timings


def save_timings(timings: Timings, results_dir: Path) -> None:
    """Keep measured step times in the results folder for later plans."""
    from ssilbench.runner.results_db import ensure_writable

    ensure_writable(results_dir)
    timings.save()
