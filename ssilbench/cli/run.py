"""``ssilbench run`` and ``ssilbench plan``: click over :mod:`ssilbench.runner.launch`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ssilbench.cli.app import State
from ssilbench.cli.options import (
    blocks_option,
    count_option,
    data_root_option,
    device_option,
    quick_option,
    results_option,
    run_setting_options,
    sweep_file_option,
    threads_option,
    yes_option,
)
from ssilbench.errors import UsageError
from ssilbench.planning.options import EXECUTORS

if TYPE_CHECKING:
    from ssilbench.runner.launch import PreparedRun
    from ssilbench.runner.sweep import SweepSummary

# Flags that go into RunOptions.executor rather than RunOptions itself.
EXECUTOR_FLAGS = ("ray_address", "cpus_per_run", "gpus_per_run", "slurm_partition",
                  "slurm_time", "slurm_parallelism", "slurm_cluster")  # fmt: skip


@click.command()
@sweep_file_option("A sweep file (TOML) instead of --method/--env/--budgets/--seeds.")
@quick_option("With --sweep: the file's CI-sized [quick] variant.")
@blocks_option()
@run_setting_options
@results_option
@data_root_option
@device_option()
@click.option("--retry-failed", is_flag=True, help="Run again the runs that failed before.")
@count_option(
    "--workers", default=1, help="Runs in parallel (processes with one torch thread each)."
)
@threads_option(
    "Torch intra-op threads of each process that trains: N, 'auto' (one for small networks "
    "on the CPU, else the cores shared among the workers; see docs/guide.md) or 'torch' "
    "(torch's own default)."
)
@click.option(
    "--stack/--no-stack",
    default=None,
    help="Train runs of one task and config together where the method can (see fit_many). "
    "Default: stacked in one process or on --executor, one run at a time per --workers "
    "process; --stack with --workers N shares stacked units, one per label budget, among "
    "the N processes (e.g. on one GPU).",
)
@click.option(
    "--cache/--no-cache",
    default=True,
    show_default=True,
    help="Reuse trained stages whose inputs are identical to an earlier run's (kept in "
    "RESULTS/cache; see 'ssilbench cache').",
)
@count_option(
    "--checkpoint-every",
    help="Save each run's training state every N steps (RESULTS/checkpoints) so that a "
    "killed run resumes where it was (a stacked group saves each of its runs).",
)
@click.option("--keep-policy", is_flag=True,
              help="Keep each finished run's final policy and spec in RESULTS/policies, to "
              "evaluate or film later with 'ssilbench eval RUN_ID' (a run's result and id are "
              "the same with or without it).")  # fmt: skip
@click.option(
    "--executor",
    type=click.Choice(EXECUTORS),
    default="local",
    show_default=True,
    help="Where runs execute: this machine (--workers), a Ray cluster, or SLURM (submitit).",
)
@click.option("--ray-address", default=None, help="Ray cluster address (default: a local Ray).")
@click.option("--cpus-per-run", type=click.FloatRange(min=0), default=None,
              help="Ray/SLURM: CPUs requested per run [default: 1].")  # fmt: skip
@click.option("--gpus-per-run", type=click.FloatRange(min=0), default=None,
              help="Ray/SLURM: GPUs requested per run [default: 0].")  # fmt: skip
@click.option("--slurm-partition", default=None, help="SLURM partition.")
@count_option("--slurm-time", help="SLURM time limit per job, minutes [default: 60].")
@count_option("--slurm-parallelism", help="SLURM: jobs of the array running at once [default: 64].")
@click.option("--slurm-cluster", type=click.Choice(["local", "debug"]), default=None,
              help="Run the SLURM path with submitit's local or in-process executor "
              "(testing a sweep before sending it to a cluster).")  # fmt: skip
@click.option("--dry-run", is_flag=True,
              help="Print the runs, the stages they train (shared, cached) and the estimated "
              "compute, then stop: nothing is claimed, trained or written.")  # fmt: skip
@click.option("--measure", is_flag=True,
              help="For the estimate of plan (or a dry run): measure on this device the step times "
              "that are neither kept in RESULTS/timings.json nor measured in the table shipped "
              "with ssilbench, and keep them there [default: estimate at once from those, and "
              "scale the others by counted FLOPs].")  # fmt: skip
@click.option("--log", "log_names", default=None, metavar="NAMES",
              help="Also send each run to these loggers (hyper-parameters when claimed, "
              "losses and evaluations while it trains, curves when recorded), "
              "comma-separated: tensorboard, wandb (offline), mlflow (file store), or a "
              "plugin's (ssilbench_register_loggers).")  # fmt: skip
@click.option("--log-dir", default=None, type=click.Path(file_okay=False),
              help="Where loggers write [default: RESULTS/logs].")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="No progress display.")
@yes_option("Start without asking. A terminal is asked before a sweep estimated to take over "
            "5 minutes; without a terminal the sweep starts (see docs/guide.md).")  # fmt: skip
@click.pass_obj
def run(state: State, **flags: Any) -> None:
    """Run a sweep of methods x environments x budgets x seeds into the results store."""
    run_command(state, flags)


@click.pass_obj
def _plan(state: State, **flags: Any) -> None:
    run_command(state, {**flags, "dry_run": True, "save_timings": True, "yes": True})


REMEASURE = click.Option(
    ["--remeasure"],
    is_flag=True,
    help="Measure the step times again instead of taking those kept in RESULTS/timings.json "
    "(which were measured at another time, perhaps at another load), and keep the new ones.",
)

RUN_ONLY = ("dry_run", "yes", "keep_policy")  # flags of run that plan does not take

plan = click.Command(
    "plan",
    params=[p for p in run.params if p.name not in RUN_ONLY] + [REMEASURE],
    callback=_plan,
    help="What 'run' with the same arguments would do: its runs, the stages they train "
    "(shared, cached) and the estimated compute from step times measured on this device "
    "(kept in RESULTS/timings.json for later plans). Nothing is claimed or trained.",
)


def run_command(state: State, flags: dict[str, Any]) -> None:
    """``run`` (or ``plan``) with the flags click parsed: plan, then preview or execute."""
    from ssilbench.planning.options import ExecutorSettings, RunOptions
    from ssilbench.runner.launch import execute_run, prepare_run, preview_run, save_timings

    state.quiet = state.quiet or flags["quiet"]
    yes = flags.pop("yes")
    log_names, log_dir = flags.pop("log_names"), flags.pop("log_dir")
    executor = ExecutorSettings(flags.pop("executor"), **{k: flags.pop(k) for k in EXECUTOR_FLAGS})
    options = RunOptions.of(**flags, executor=executor)
    if options.measure and not options.dry_run:
        raise UsageError("--measure measures step times for a dry run's estimate: add "
                         "--dry-run, or run 'ssilbench plan' with the same arguments.")  # fmt: skip
    prepared = prepare_run(state.plugins, options)
    for note in prepared.plan.notes:  # what planning chose: a family's paper protocol
        click.echo(note, err=True)
    if options.dry_run:
        measuring = options.measure or options.remeasure
        preview, timings = preview_run(prepared, state.plugins, state.log(), measuring)
        click.echo(preview.render())
        if preview.measured_now:
            save_timings(timings, prepared.results_dir)
        return
    if prepared.threads is not None:
        state.log()(prepared.threads.describe())
    if not yes and not confirm_start(state, prepared):
        click.echo("Not started: nothing was run or recorded.", err=True)
        return
    from ssilbench.cli.progress import quiet_observer, sweep_progress
    from ssilbench.loggers.base import make_loggers, parse_log_names

    folder = Path(log_dir) if log_dir else prepared.results_dir / "logs"
    loggers = make_loggers(state.plugins, parse_log_names(log_names), folder)
    watch = quiet_observer(loggers) if state.quiet else sweep_progress(
        len(prepared.plan.runs), loggers)  # fmt: skip
    with watch as on_progress:
        report = execute_run(prepared, state.plugins, state.plugin_flags, on_progress)
    for line in summary_lines(report, prepared.results_dir, options.keep_policy):
        click.echo(line, err=True)
    if not report.ok:
        sys.exit(1)


def interactive() -> bool:
    """Whether someone at a terminal can answer a question (standard input and error are
    terminals): not in CI, a batch job, a pipe or a test."""
    return sys.stdin.isatty() and sys.stderr.isatty()


def confirm_start(state: State, prepared: PreparedRun) -> bool:
    """Whether to start the sweep. In a terminal, a sweep estimated to take longer than
    CONFIRM_OVER_S shows its estimate (steps x step times measured on this device, kept in
    RESULTS/timings.json) and asks; the answer no starts nothing. Without a terminal nobody
    can answer: the sweep starts, after a line with its estimate where the step times are
    kept already (``ssilbench plan`` keeps them), so a batch job neither blocks nor spends
    time measuring."""
    from ssilbench.runner import launch

    asking = interactive()
    estimate = launch.estimate_run(prepared, state.plugins, measure=asking, log=state.log())
    wall = estimate.wall_seconds if estimate is not None else None
    if estimate is None or wall is None or wall <= launch.CONFIRM_OVER_S:
        return True
    if not asking:
        click.echo(estimate.summary() + "; starting (no terminal to ask).", err=True)
        return True
    click.echo(estimate.render(), err=True)
    return click.confirm(f"Start {len(estimate.pending)} run(s)?", default=False, err=True)


def summary_lines(report: SweepSummary, results_dir: Path, kept: bool = False) -> list[str]:
    """What a finished sweep tells on stderr: counts, each failure, what to run next
    (``kept``: where the runs' policies were kept, and how to evaluate one)."""
    lines = [
        f"{report.done} run(s) done, {report.skipped} already recorded, "
        f"{len(report.failed)} failed; results in {results_dir}"
        + (
            f" ({report.elsewhere} taken by another sweep on this store)"
            if report.elsewhere
            else ""
        )
    ]
    lines += [f"  failed: {text}: {err}" for text, err in report.failed]
    if report.interrupted:
        lines.append(f"  {report.lost}: {report.interrupted} run(s) interrupted; run the same "
                     "command again to resume them.")  # fmt: skip
    if kept and report.done:
        from ssilbench.eval.kept import POLICIES

        lines.append(f"  policies kept in {results_dir / POLICIES} (<run id>.pt): evaluate or "
                     f"film one with 'ssilbench eval RUN_ID --results {results_dir}'.")  # fmt: skip
    if report.failed_before:
        lines.append(f"  {report.failed_before} run(s) failed in an earlier sweep; add "
                     "--retry-failed to run them again.")  # fmt: skip
    return lines
