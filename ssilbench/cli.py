"""The ``ssilbench`` command.

Every error a user can cause is an :class:`~ssilbench.errors.SsilbenchError`: it is printed as
one message without a traceback (``--debug`` shows it) and the command exits with 2. Heavy
imports (torch, simulators) happen only inside the commands that train or evaluate, so
``ssilbench --help`` and ``ssilbench list`` stay fast.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

import click

from ssilbench import __version__
from ssilbench.errors import SsilbenchError, UsageError

DEFAULT_RESULTS = os.environ.get("SSILBENCH_RESULTS", "results")
DEFAULT_DATA = os.environ.get("SSILBENCH_DATA", str(Path("~/.cache/ssilbench/data").expanduser()))


class State:
    def __init__(self, plugin_flags: tuple[str, ...], debug: bool, quiet: bool) -> None:
        self.plugin_flags = plugin_flags
        self.debug = debug
        self.quiet = quiet
        self._plugins = None

    @property
    def plugins(self):
        if self._plugins is None:
            from ssilbench.plugins import load_plugins

            self._plugins = load_plugins(self.plugin_flags)
        return self._plugins


def _csv(text: str, what: str, example: str) -> list[str]:
    items = list(dict.fromkeys(i.strip() for i in text.split(",") if i.strip()))
    if not items:
        raise UsageError(f"The {what} list is empty: write e.g. {example}.")
    return items


def _seeds(text: str) -> list[int]:
    seeds = []
    for item in _csv(text, "seed", "--seeds 0,1,2"):
        try:
            seeds.append(int(item))
        except ValueError:
            raise UsageError(
                f"Seed {item!r} is not an integer: write e.g. --seeds 0,1,2."
            ) from None
    return list(dict.fromkeys(seeds))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ssilbench")
@click.option(
    "-p",
    "--plugin",
    "plugin_flags",
    multiple=True,
    metavar="NAME",
    help="Load plugin NAME (entry-point name or module), or block it with 'no:NAME'. Repeatable.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option("-q", "--quiet", is_flag=True, help="No progress output.")
@click.pass_context
def cli(ctx: click.Context, plugin_flags: tuple[str, ...], debug: bool, quiet: bool) -> None:
    """ssilbench: benchmark semi-supervised imitation learning methods.

    \b
    Quick start:
      ssilbench list
      ssilbench run --method bc,idm_labeling,vm_idm --env maze:10x10 --budgets 16,64,256 --seeds 0,1
      ssilbench leaderboard --export md
    """
    ctx.obj = State(plugin_flags, debug, quiet)


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_obj
def list_cmd(state: State, as_json: bool) -> None:
    """List methods, environments and architectures, and plugins that failed to load."""
    plugins = state.plugins
    rows = []
    for kind, registry in plugins.registries().items():
        for name in registry.names():
            entry = registry.entries[name]
            rows.append(
                {
                    "kind": kind.rstrip("s"),
                    "name": name,
                    "plugin": entry.origin.plugin,
                    "distribution": entry.origin.distribution,
                    "version": entry.origin.version,
                    "description": entry.description,
                }
            )
    broken = [
        {
            "plugin": b.origin.plugin,
            "distribution": b.origin.distribution,
            "version": b.origin.version,
            "error": b.error,
        }
        for b in plugins.broken
    ]
    if as_json:
        click.echo(json.dumps({"entries": rows, "broken": broken}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for kind in ("method", "environment", "architecture"):
        table = Table(title=f"{kind}s", title_justify="left")
        for col in ("name", "plugin", "distribution", "description"):
            table.add_column(col)
        for row in (r for r in rows if r["kind"] == kind):
            dist = f"{row['distribution']} {row['version']}" if row["distribution"] else "-"
            table.add_row(row["name"], row["plugin"], dist, row["description"])
        console.print(table)
    if broken:
        table = Table(title="broken plugins", title_justify="left", style="red")
        for col in ("plugin", "distribution", "error"):
            table.add_column(col)
        for b in broken:
            dist = f"{b['distribution']} {b['version']}" if b["distribution"] else "-"
            table.add_row(b["plugin"], dist, b["error"])
        console.print(table)


@cli.command()
@click.option(
    "--sweep",
    "sweep_file",
    type=click.Path(dir_okay=False),
    default=None,
    help="A sweep file (TOML) instead of --method/--env/--budgets/--seeds.",
)
@click.option("--quick", is_flag=True, help="With --sweep: the file's CI-sized [quick] variant.")
@click.option(
    "--blocks",
    default=None,
    help="With --sweep: only the blocks with these names or panels (comma-separated).",
)
@click.option("--method", "methods", default=None, help="Comma-separated method names.")
@click.option("--env", "envs", default=None, help="Comma-separated ids: family:task or family:all.")
@click.option(
    "--budgets", default=None, help="Label budgets N_L: counts, fractions in (0,1], 'all'."
)
@click.option("--seeds", default=None, help="Comma-separated integer seeds [default: 0].")
@click.option(
    "-c",
    "--config",
    "config",
    multiple=True,
    metavar="KEY=VALUE",
    help="Method config value (all methods that have KEY); 'METHOD.KEY=VALUE' for one method.",
)
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Environment option, e.g. -o state=image. See docs/environments/.",
)
@click.option(
    "--steps",
    type=int,
    default=None,
    help="Total training steps per run (default: the environment's).",
)
@click.option(
    "--steps-scale",
    type=float,
    default=None,
    help="Train this fraction of each environment's default steps, e.g. 0.01 for small runs "
    "(stage splits keep their proportions).",
)
@click.option("--results", default=DEFAULT_RESULTS, show_default=True, help="Results directory.")
@click.option(
    "--data-root", default=DEFAULT_DATA, show_default=True, help="Dataset cache directory."
)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--retry-failed", is_flag=True, help="Run again the runs that failed before.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs in parallel (processes with one torch thread each).",
)
@click.option(
    "--eval-every",
    type=click.IntRange(min=1),
    default=None,
    help="Evaluate every N steps of a policy stage (default: the environment's).",
)
@click.option("--stop-early", is_flag=True, help="Stop stages once training has converged.")
@click.option(
    "--no-rollouts", is_flag=True, help="Evaluate on the test set only (no rollouts, no score)."
)
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=None,
    help="Torch intra-op threads (1 is fastest for tiny models on a busy machine).",
)
@click.option(
    "--stack/--no-stack",
    default=True,
    show_default=True,
    help="Train runs of one task and config together where the method can (see fit_many); "
    "single-process sweeps only (--workers 1).",
)
@click.option(
    "--cache/--no-cache",
    default=True,
    show_default=True,
    help="Reuse trained stages whose inputs are identical to an earlier run's (kept in "
    "RESULTS/cache; see 'ssilbench cache').",
)
@click.option(
    "--checkpoint-every",
    type=click.IntRange(min=1),
    default=None,
    help="Save each run's training state every N steps (RESULTS/checkpoints) so that a "
    "killed run resumes where it was; runs then train one at a time.",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "ray", "slurm"]),
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
@click.option("--slurm-time", type=click.IntRange(min=1), default=None,
              help="SLURM time limit per job, minutes [default: 60].")  # fmt: skip
@click.option("--slurm-parallelism", type=click.IntRange(min=1), default=None,
              help="SLURM: jobs of the array running at once [default: 64].")  # fmt: skip
@click.option("--slurm-cluster", type=click.Choice(["local", "debug"]), default=None,
              help="Run the SLURM path with submitit's local or in-process executor "
              "(testing a sweep before sending it to a cluster).")  # fmt: skip
@click.option("--dry-run", is_flag=True,
              help="Print the runs, the stages they train (shared, cached) and the estimated "
              "compute, then stop: nothing is claimed, trained or written.")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@click.pass_obj
def run(
    state: State,
    sweep_file,
    quick,
    blocks,
    methods,
    envs,
    budgets,
    seeds,
    config,
    options,
    steps,
    steps_scale,
    results,
    data_root,
    device,
    retry_failed,
    workers,
    eval_every,
    stop_early,
    no_rollouts,
    threads,
    stack,
    cache,
    checkpoint_every,
    executor,
    ray_address,
    cpus_per_run,
    gpus_per_run,
    slurm_partition,
    slurm_time,
    slurm_parallelism,
    slurm_cluster,
    dry_run,
    quiet,
    save_timings: bool = False,
) -> None:
    """Run a sweep of methods x environments x budgets x seeds into the results store."""
    from pydantic import ValidationError

    from ssilbench.data.split import parse_budgets
    from ssilbench.runner.plan import build_plan, parse_assignments
    from ssilbench.runner.results_db import ResultsStore, ensure_writable
    from ssilbench.runner.spec import Sweep

    state.quiet = state.quiet or quiet
    data_root = Path(data_root).expanduser()
    if sweep_file is not None:
        given = [f for f, v in (("--method", methods), ("--env", envs), ("--budgets", budgets),
                                ("--config", config), ("--option", options), ("--steps", steps),
                                ("--steps-scale", steps_scale), ("--seeds", seeds),
                                ("--eval-every", eval_every), ("--stop-early", stop_early),
                                ("--no-rollouts", no_rollouts))
                 if v]  # fmt: skip
        if given:
            raise UsageError(
                f"--sweep takes methods, environments and budgets from the file; drop "
                f"{', '.join(given)}."
            )
        from ssilbench.runner.sweepfile import load_sweep_file, plan_blocks, select_blocks

        results_dir = Path(results).expanduser() if dry_run else ensure_writable(Path(results))
        chosen = select_blocks(
            load_sweep_file(Path(sweep_file)), Path(sweep_file),
            _csv(blocks, "block", "--blocks positions") if blocks is not None else [],
        )  # fmt: skip
        plan, sweeps = plan_blocks(state.plugins, chosen, Path(sweep_file), data_root, quick,
                                   "read" if dry_run else "prepare")  # fmt: skip
    else:
        if quick or blocks is not None:
            raise UsageError(f"{'--quick' if quick else '--blocks'} needs --sweep FILE.")
        missing = [f for f, v in (("--method", methods), ("--env", envs), ("--budgets", budgets))
                   if not v]  # fmt: skip
        if missing:
            raise UsageError(
                f"Missing {', '.join(missing)}: give --method, --env and --budgets, or --sweep "
                "FILE."
            )
        if steps is not None and steps < 1:
            raise UsageError(f"--steps must be a positive integer, got {steps}.")
        if steps_scale is not None and not steps_scale > 0:
            raise UsageError(
                f"--steps-scale must be a positive fraction of the default steps, e.g. 0.01; "
                f"got {steps_scale}."
            )
        if steps_scale is not None and steps is not None:
            raise UsageError("Give --steps or --steps-scale, not both.")
        try:
            sweep = Sweep(
                methods=_csv(methods, "method", "--method bc,vm_idm"),
                envs=_csv(envs, "environment", "--env maze:10x10"),
                budgets=parse_budgets(budgets),
                seeds=_seeds(seeds if seeds is not None else "0"),
                config=parse_assignments(config, "--config"),
                options=parse_assignments(options, "--option"),
                steps=steps,
                steps_scale=steps_scale,
                eval_every=eval_every,
                stop_early=stop_early,
                rollouts=not no_rollouts,
            )
        except ValidationError as exc:
            raise UsageError(str(exc)) from None
        results_dir = Path(results).expanduser() if dry_run else ensure_writable(Path(results))
        plan = build_plan(state.plugins, sweep, data_root, "read" if dry_run else "prepare")
        sweeps = [sweep]

    from ssilbench.runner.sweep import PoolSetup
    from ssilbench.runner.worker import resolve_device

    torch_device = resolve_device(device)
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    from ssilbench.runner.worker import RunStorage

    remote = _executor(executor, workers, results_dir, ray_address, cpus_per_run, gpus_per_run,
                       slurm_partition, slurm_time, slurm_parallelism, slurm_cluster)  # fmt: skip
    if dry_run:
        _print_dry_run(state, plan, torch_device, results_dir, cache, workers, save_timings,
                       retry_failed)  # fmt: skip
        return
    storage = RunStorage(
        cache_root=results_dir / "cache" if cache else None,
        checkpoint_root=results_dir / "checkpoints",
        checkpoint_every=checkpoint_every or 0,
    )
    setup = PoolSetup(state.plugin_flags, sweeps, data_root, str(torch_device), storage)
    with ResultsStore(results_dir) as store:
        report = _run_with_progress(
            plan, state, store, torch_device, retry_failed, workers, setup, stack, remote
        )
    summary = (
        f"{report.done} run(s) done, {report.skipped} already recorded, "
        f"{len(report.failed)} failed; results in {results_dir}"
        + (
            f" ({report.elsewhere} taken by another sweep on this store)"
            if report.elsewhere
            else ""
        )
    )
    click.echo(summary, err=True)
    for text, err in report.failed:
        click.echo(f"  failed: {text}: {err}", err=True)
    if report.interrupted:
        click.echo(
            f"  {report.lost}: {report.interrupted} run(s) interrupted; run the same "
            "command again to resume them.",
            err=True,
        )
    if report.failed_before:
        click.echo(
            f"  {report.failed_before} run(s) failed in an earlier sweep; add --retry-failed to "
            "run them again.",
            err=True,
        )
    if not report.ok:
        sys.exit(1)


def _print_dry_run(state: State, plan, device, results_dir: Path, cache: bool, workers: int,
                   save_timings: bool, retry_failed: bool) -> None:  # fmt: skip
    """The stage plan and cost of a sweep (``run --dry-run``, ``plan``)."""
    from ssilbench.runner.dryrun import dry_run
    from ssilbench.runner.results_db import ensure_writable, read_statuses
    from ssilbench.runner.timings import FILE, Timings

    # What the sweep would skip: done runs, and failed ones unless they are to be retried.
    skipped = ("done",) if retry_failed else ("done", "failed")
    done = {run_id for run_id, status in read_statuses(results_dir).items() if status in skipped}
    timings = Timings(results_dir / FILE)
    log = (lambda message: None) if state.quiet else (lambda m: click.echo(m, err=True))
    report = dry_run(plan, state.plugins, device, done, results_dir / "cache" if cache else None,
                     timings, workers=workers, log=log)  # fmt: skip
    click.echo(report.render())
    if save_timings:
        ensure_writable(results_dir)
        timings.save()


@click.pass_context
def _plan(ctx: click.Context, **kwargs) -> None:
    ctx.invoke(run, **{**kwargs, "dry_run": True}, save_timings=True)


cli.add_command(click.Command(
    "plan",
    params=[p for p in run.params if p.name != "dry_run"],
    callback=_plan,
    help="What 'run' with the same arguments would do: its runs, the stages they train "
    "(shared, cached) and the estimated compute from step times measured on this device "
    "(kept in RESULTS/timings.json for later plans). Nothing is claimed or trained.",
))  # fmt: skip


def _executor(kind, workers, results_dir, ray_address, cpus, gpus, partition, minutes,
              parallelism, cluster):  # fmt: skip
    """The executor object for --executor, after checking that its flags fit together."""
    ray_flags = {"--ray-address": ray_address}
    slurm_flags = {"--slurm-partition": partition, "--slurm-time": minutes,
                   "--slurm-parallelism": parallelism, "--slurm-cluster": cluster}  # fmt: skip
    stray = [
        f
        for f, v in {**ray_flags, **slurm_flags}.items()
        if v is not None
        and not (kind == "ray" and f in ray_flags or kind == "slurm" and f in slurm_flags)
    ]
    if kind == "local":
        stray += [f for f, v in (("--cpus-per-run", cpus), ("--gpus-per-run", gpus)) if v]
    if stray:
        owner = ("ray" if stray[0] in ray_flags else "slurm" if stray[0] in slurm_flags
                 else "ray or slurm")  # fmt: skip
        raise UsageError(
            f"{', '.join(stray)} only apply to --executor {owner}; drop "
            f"{'it' if len(stray) == 1 else 'them'} or choose that executor."
        )
    if kind != "local" and workers != 1:
        raise UsageError(f"--workers is for --executor local; with {kind}, size the run "
                         "requests with --cpus-per-run/--gpus-per-run instead.")  # fmt: skip
    from ssilbench.runner.executors import RayExecutor, SlurmExecutor

    if kind == "ray":
        return RayExecutor(ray_address, cpus if cpus is not None else 1.0, gpus or 0.0)
    if kind == "slurm":
        if gpus is not None and gpus != int(gpus):
            raise UsageError(f"--gpus-per-run must be a whole number for SLURM, got {gpus:g}.")
        return SlurmExecutor(results_dir / "slurm", partition, minutes or 60, int(gpus or 0),
                             max(1, int(cpus or 1)), parallelism or 64, cluster)  # fmt: skip
    return None


def _run_with_progress(
    plan, state: State, store, device, retry_failed: bool, workers, setup, stack: bool,
    executor=None,
):  # fmt: skip
    from ssilbench.runner.sweep import run_sweep

    if state.quiet:
        return run_sweep(
            plan, state.plugins, store, device, retry_failed, None, workers, setup, stack,
            setup.storage, executor,
        )  # fmt: skip
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    columns = (
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[green]{task.fields[done]} done[/] · {task.fields[running]} running · "
                   "[red]{task.fields[failed]} failed[/] · {task.fields[left]} to go"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
    )  # fmt: skip
    counts = {"done": 0, "running": 0, "failed": 0, "left": len(plan.runs)}
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("", total=len(plan.runs), **counts)

        def on_progress(event: str, text: str) -> None:
            # "start" names a unit (several runs when stacked, all of them on a pool).
            if event == "start":
                progress.update(bar, description=text)
                return
            if event == "claimed":
                counts["running"] += 1
            elif event in ("done", "failed"):
                counts[event] += 1
                counts["running"] = max(0, counts["running"] - 1)
                if event == "failed":
                    progress.console.print(f"[red]failed[/red] {text}")
            counts["left"] -= event in ("done", "failed", "skipped")
            if event != "claimed":
                progress.advance(bar)
            progress.update(bar, **counts)

        report = run_sweep(
            plan, state.plugins, store, device, retry_failed, on_progress, workers, setup, stack,
            setup.storage, executor,
        )  # fmt: skip
        progress.update(bar, description="")
    return report


@cli.command()
@click.option(
    "--export",
    "fmt",
    type=click.Choice(["md", "csv", "json", "tex", "html"]),
    default="md",
    show_default=True,
)
@click.option(
    "--out", type=click.Path(dir_okay=False), default=None, help="Write to FILE instead of stdout."
)
@click.option("--results", default=DEFAULT_RESULTS, show_default=True, help="Results directory.")
@click.option(
    "--metric",
    default="score",
    show_default=True,
    help="'score' (normalised) or an environment metric such as test_accuracy.",
)
@click.option(
    "--compare",
    nargs=2,
    default=None,
    metavar="A B",
    help="Also give the probability that method label A beats B, per suite and budget.",
)
def leaderboard(fmt: str, out: str | None, results: str, metric: str, compare) -> None:
    """Aggregate finished runs into tables: rows = methods, columns = N_L."""
    from ssilbench.leaderboard.render import render
    from ssilbench.leaderboard.table import build_table
    from ssilbench.runner.results_db import ResultsStore

    with ResultsStore(Path(results), create=False) as store:
        records = store.rows("done")
    pair = tuple(compare) if compare else None
    if pair is not None:
        known = sorted({r["method_label"] for r in records})
        wrong = [m for m in pair if m not in known]
        if wrong or pair[0] == pair[1]:
            problem = f"{wrong[0]!r} is not a method label of the store" if wrong else (
                "compare two different methods")  # fmt: skip
            raise UsageError(
                f"--compare A B: {problem}. Labels: {'; '.join(known)} (quote labels with "
                "spaces, e.g. --compare idm_labeling 'bc (arch=lc)')."
            )
    table = build_table(records, metric, pair)
    if metric == "score" and records and not table.tables:
        known = sorted({k for r in records for k in (r.get("metrics") or {})})
        raise UsageError(
            "The finished runs have no rollout score (they ran with --no-rollouts); choose a "
            f"metric with --metric: {', '.join(known)}."
        )
    if metric != "score" and records and not table.tables:
        known = sorted({k for r in records for k in (r.get("metrics") or {})})
        raise UsageError(
            f"No run recorded the metric '{metric}'. Recorded metrics: score, {', '.join(known)}."
        )
    text = render(table, fmt)
    if out is None:
        click.echo(text, nl=False)
        return
    target = Path(out)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text)
        tmp.replace(target)
    except OSError as exc:
        raise UsageError(
            f"Cannot write {target}: {exc.strerror}. Choose another --out path."
        ) from None
    click.echo(f"wrote {target}", err=True)


def _study(
    state: State, path: str, results: str, data_root: str, quick: bool, allow_empty: bool = False
):
    """A sweep file, its finished runs and their panels."""
    from ssilbench.leaderboard.figures import collect
    from ssilbench.runner.results_db import ResultsStore
    from ssilbench.runner.sweepfile import load_sweep_file, panel_titles

    sweep_file = load_sweep_file(Path(path))
    titles = panel_titles(state.plugins, sweep_file, Path(data_root).expanduser(), quick)
    with ResultsStore(Path(results), create=False) as store:
        records = [r for r in store.rows("done") if r["run_id"] in titles]
    if not records and not allow_empty:
        raise UsageError(
            f"No finished runs of {path} in {results}: run 'ssilbench run --sweep {path}"
            f"{' --quick' if quick else ''}' first (same --results)."
        )
    return sweep_file, collect(records, titles, sweep_file.metric, sweep_file.display)


_STUDY_OPTIONS = [
    click.option("--sweep", "sweeps", multiple=True, required=True, type=click.Path(dir_okay=False),
                 help="Sweep file(s) of the studies."),
    click.option("--quick", is_flag=True, help="The files' [quick] variants."),
    click.option("--results", default=DEFAULT_RESULTS, show_default=True),
    click.option("--data-root", default=DEFAULT_DATA, show_default=True),
]  # fmt: skip


def _study_options(command):
    for option in reversed(_STUDY_OPTIONS):
        command = option(command)
    return command


@cli.command()
@_study_options
@click.option("--out", default="figures", show_default=True, help="Folder for PNG and SVG files.")
@click.pass_obj
def plot(state: State, sweeps, quick, results, data_root, out) -> None:
    """Draw each study's figure (score vs label budget per panel) from the results store."""
    from ssilbench.leaderboard.figures import draw

    for path in sweeps:
        sweep_file, panels = _study(state, path, results, data_root, quick)
        name = sweep_file.name + ("-quick" if quick else "")
        for written in draw(panels, sweep_file.title or sweep_file.name, sweep_file.metric,
                            sweep_file.x_label, Path(out) / name):  # fmt: skip
            click.echo(f"wrote {written}", err=True)


@cli.command()
@_study_options
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Markdown file.")
@click.pass_obj
def report(state: State, sweeps, quick, results, data_root, out) -> None:
    """Write a replication report: figures, numbers and the paper's claims, checked."""
    import os

    from ssilbench.leaderboard.figures import draw
    from ssilbench.leaderboard.report import study_section

    target = Path(out)
    figures = target.parent / "figures"
    lines = [
        "# Replication report",
        "",
        "Generated from the results store by:",
        "",
        "```",
        "ssilbench report " + " ".join(f"--sweep {p}" for p in sweeps)
        + (" --quick" if quick else "") + f" --out {out}",
        "```",
        "",
    ]  # fmt: skip
    tally = {True: 0, False: 0, None: 0}
    for path in sweeps:
        sweep_file, panels = _study(state, path, results, data_root, quick, allow_empty=True)
        name = sweep_file.name + ("-quick" if quick else "")
        command = f"ssilbench run --sweep {path}" + (" --quick" if quick else "")
        figure = None
        if panels:
            png, _ = draw(panels, sweep_file.title or sweep_file.name, sweep_file.metric,
                          sweep_file.x_label, figures / name)  # fmt: skip
            figure = Path(os.path.relpath(png, target.parent))
        section, verdicts = study_section(sweep_file, Path(path), panels, figure, command)
        lines += section
        for v in verdicts:
            tally[v.held] += 1
    lines.insert(2, f"Claims held: {tally[True]}, not held: {tally[False]}, "
                    f"not checked: {tally[None]}.\n")  # fmt: skip
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines))
    click.echo(f"wrote {target} and figures in {figures}", err=True)


def _writable_folder(folder: Path) -> Path:
    """Create ``folder`` and prove it takes files, before any work is done for it."""
    probe = folder / f".write-probe-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UsageError(
            f"Cannot write to --out {folder}: {exc.strerror or exc}. Choose a writable folder "
            "with --out DIR."
        ) from None
    return folder


@cli.command()
@click.option(
    "--env",
    "envs",
    required=True,
    help="Comma-separated environment ids: family:task or family:all (procgen:all).",
)
@click.option("--results", default=DEFAULT_RESULTS, show_default=True, help="Results directory.")
@click.option(
    "--out",
    default="analysis",
    show_default=True,
    help="Folder for the figures (PNG, SVG), CSV tables and Markdown report.",
)
@click.option(
    "--method",
    default="idm_labeling",
    show_default=True,
    help="Method label (or name) whose return gap is measured.",
)
@click.option(
    "--baseline",
    default="bc",
    show_default=True,
    help="Method label (or name) it is compared with.",
)
@click.option(
    "--by",
    default="complexity",
    show_default=True,
    help="Environment metadata key that groups the games.",
)
@click.option(
    "--entropy-budget",
    default=None,
    help="Label budget whose entropies are compared [default: the largest both "
    "methods recorded per game].",
)
@click.pass_obj
def analyze(state: State, envs, results, out, method, baseline, by, entropy_budget) -> None:
    """The paper's Procgen analysis: return gap of METHOD over BASELINE by complexity class,
    and entropy gap vs return gap, from the results store."""
    import re

    from ssilbench.data.split import parse_budget
    from ssilbench.errors import did_you_mean
    from ssilbench.leaderboard import analysis as an
    from ssilbench.leaderboard import analysis_report as ar
    from ssilbench.leaderboard.analysis_figures import complexity_figure, stochasticity_figure
    from ssilbench.runner.plan import _expand_envs
    from ssilbench.runner.results_db import ResultsStore

    ids = _csv(envs, "environment", "--env procgen:all")
    wanted = [f"{family}:{task}" for family, task in _expand_envs(state.plugins, ids)]
    budget = parse_budget(entropy_budget) if entropy_budget is not None else None
    with ResultsStore(Path(results), create=False) as store:
        records = [r for r in store.rows("done") if r["env"] in wanted]
    scope = ", ".join(ids)
    if not records:
        raise UsageError(
            f"No finished runs of {scope} in {results}: run e.g. 'ssilbench run --method "
            f"{method},{baseline} --env {scope} ...' first (same --results)."
        )
    mine = an.resolve_label(records, method, "--method", scope)
    theirs = an.resolve_label(records, baseline, "--baseline", scope)
    if mine == theirs:
        raise UsageError(f"--method and --baseline both name '{mine}': compare two methods.")
    metadata = an.metadata_from_registry(state.plugins)
    groups = an.groups_of(records, metadata, by)
    if all(g is None for g in groups.values()):
        keys = sorted({k for r in records for k in metadata(r)})
        raise UsageError(
            f"--by {by}: no environment of {scope} has the metadata key '{by}'."
            f"{did_you_mean(by, keys)} Keys: {', '.join(keys) or '(none)'}."
        )
    folder = _writable_folder(Path(out))
    result = an.analyze(records, mine, theirs, groups, by, wanted, budget)
    # File names from labels and keys: anything but letters, digits, '_' and '-' becomes '_'
    # (a '.' would be taken for a suffix).
    stem, tag = (re.sub(r"[^A-Za-z0-9_-]+", "_", t)
                 for t in (f"{ids[0].partition(':')[0]}-{mine}-vs-{theirs}", by))  # fmt: skip
    text = ar.to_markdown(result)
    try:
        written = [
            *complexity_figure(result, folder / f"{stem}-{tag}"),
            *stochasticity_figure(result, folder / f"{stem}-entropy"),
        ]
        for name, content in (("games.csv", ar.games_csv(result)),
                              (f"{tag}.csv", ar.groups_csv(result)),
                              ("correlation.csv", ar.correlation_csv(result)),
                              ("report.md", text)):  # fmt: skip
            path = folder / f"{stem}-{name}"
            path.write_text(content)
            written.append(path)
    except OSError as exc:
        raise UsageError(
            f"Cannot write to --out {folder}: {exc.strerror or exc}. Choose another folder."
        ) from None
    click.echo(text, nl=False)
    for path in written:
        click.echo(f"wrote {path}", err=True)


@cli.group()
def data() -> None:
    """Build, verify or rebuild expert datasets."""


@data.command("build")
@click.argument("env_ids")
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE")
@click.option("--data-root", default=DEFAULT_DATA, show_default=True)
@click.option("--rebuild", is_flag=True, help="Delete the cached dataset first and build it again.")
@click.pass_obj
def data_build(state: State, env_ids: str, options, data_root: str, rebuild: bool) -> None:
    """Build (or verify) the datasets of ENV_IDS, e.g. maze:all."""
    import shutil

    from ssilbench.runner.plan import _expand_envs, parse_assignments, validate_model

    values = parse_assignments(options, "--option")
    for family, task_name in _expand_envs(
        state.plugins, _csv(env_ids, "environment", "maze:10x10")
    ):
        environment = state.plugins.environments.create(family)
        opts = validate_model(environment.Options, values, f"options of environment '{family}'")
        task = environment.load(task_name, opts)
        root = Path(data_root).expanduser()
        if rebuild:
            from ssilbench.errors import DatasetError

            try:
                stale = task.dataset(root).root
            except DatasetError as exc:
                if exc.root is None:
                    raise
                stale = exc.root
            shutil.rmtree(stale, ignore_errors=True)
        store = task.dataset(root)
        click.echo(
            f"{family}:{task_name}: {store.num_frames} frames, {store.num_episodes} episodes, "
            f"{store.num_transitions} transitions at {store.root}"
        )


def _log(state: State):
    """Progress lines on stderr, or nothing with --quiet."""
    return (lambda line: None) if state.quiet else (lambda line: click.echo(line, err=True))


def _configured_task(state: State, env_id: str, options):
    """(family, task name, Task) of one ``family:task`` id with its ``-o`` options applied."""
    from ssilbench.registry import split_env_id
    from ssilbench.runner.plan import _expand_envs, parse_assignments, validate_model

    family, task_name = split_env_id(env_id)
    if task_name == "all":
        raise UsageError(f"Give one task, e.g. '{family}:TASK', not '{env_id}'.")
    ((family, task_name),) = _expand_envs(state.plugins, [env_id])
    environment = state.plugins.environments.create(family)
    values = parse_assignments(options, "--option")
    opts = validate_model(environment.Options, values, f"options of environment '{family}'")
    return family, task_name, environment.load(task_name, opts)


@data.command("import")
@click.argument("family")
@click.option(
    "--from",
    "source",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder holding the data in the environment's published layout.",
)
@click.option(
    "--games",
    "--tasks",
    "tasks",
    default=None,
    help="Comma-separated tasks to import [default: every one found].",
)
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Environment option, e.g. -o dataset=NAME.",
)
@click.option("--data-root", default=DEFAULT_DATA, show_default=True)
@click.option("--replace", is_flag=True, help="Import again over datasets already imported.")
@click.pass_obj
def data_import(state: State, family: str, source: str, tasks, options, data_root: str,
                replace: bool) -> None:  # fmt: skip
    """Import the expert data of FAMILY (e.g. procgen) from a local folder (a download)."""
    from ssilbench.api import provides
    from ssilbench.runner.plan import _expand_envs, parse_assignments, validate_model

    if ":" in family:
        raise UsageError(f"'data import' takes a family, e.g. 'procgen'; pick tasks with "
                         f"--games, not {family!r}.")  # fmt: skip
    environment = state.plugins.environments.create(family)
    if not provides(environment, "import_dataset"):
        raise UsageError(f"Environment '{family}' has no importer: its datasets are built "
                         f"with 'ssilbench data build {family}:all'.")  # fmt: skip
    chosen: list[str] = []
    if tasks is not None:
        ids = [f"{family}:{t}" for t in _csv(tasks, "task", "--games bigfish,coinrun")]
        chosen = [t for _, t in _expand_envs(state.plugins, ids)]
    values = parse_assignments(options, "--option")
    opts = validate_model(environment.Options, values, f"options of environment '{family}'")
    stores = environment.import_dataset(Path(source), Path(data_root).expanduser(), chosen, opts,
                                        replace=replace, log=_log(state))  # fmt: skip
    for store in stores:
        click.echo(f"{store.root}: {store.num_frames} frames, {store.num_episodes} episodes, "
                   f"{store.num_transitions} transitions")  # fmt: skip


@data.command("collect")
@click.argument("env_id")
@click.option(
    "--policy",
    required=True,
    type=click.Path(dir_okay=False),
    help="Checkpoint of the policy to roll out (from 'ssilbench expert train').",
)
@click.option("--frames", required=True, type=click.IntRange(min=2), help="Frames to store.")
@click.option(
    "--test-frames",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Frames of other episodes stored as the test split (offline diagnostics).",
)
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True)
@click.option(
    "-o",
    "--option",
    "options",
    multiple=True,
    metavar="KEY=VALUE",
    help="Environment option, e.g. -o dataset=NAME.",
)
@click.option("--data-root", default=DEFAULT_DATA, show_default=True)
@click.option("--replace", is_flag=True, help="Overwrite a dataset of the same name.")
@click.option("--device", default="cpu", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.pass_obj
def data_collect(state: State, env_id: str, policy: str, frames: int, test_frames: int,
                 seed: int, options, data_root: str, replace: bool,
                 device: str) -> None:  # fmt: skip
    """Roll out a policy checkpoint in ENV_ID and store the frames as its dataset."""
    from ssilbench.api import provides

    family, task_name, task = _configured_task(state, env_id, options)
    if not provides(task, "collect_dataset"):
        raise UsageError(f"Environment '{family}' cannot collect datasets from a policy: "
                         f"use 'ssilbench data build {env_id}'.")  # fmt: skip
    from ssilbench.runner.worker import resolve_device

    store = task.collect_dataset(Path(policy), frames, Path(data_root).expanduser(), seed=seed,
                                 replace=replace, device=resolve_device(device),
                                 log=_log(state), test_frames=test_frames)  # fmt: skip
    click.echo(f"{family}:{task_name}: {store.num_frames} frames, {store.num_episodes} episodes, "
               f"{store.num_transitions} transitions at {store.root}")  # fmt: skip


@cli.group()
def expert() -> None:
    """Train the experts whose rollouts 'ssilbench data collect' stores."""


@expert.command("train")
@click.argument("env_id")
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=None,
    help="Environment steps in total [default: the expert config's].",
)
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help="Checkpoint file; an existing one is resumed "
              "[default: DATA_ROOT/experts/FAMILY/TASK.pt].")  # fmt: skip
@click.option(
    "-c",
    "--config",
    "config",
    multiple=True,
    metavar="KEY=VALUE",
    help="Expert setting, e.g. -c scale=1 -c num_envs=16.",
)
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE")
@click.option("--data-root", default=DEFAULT_DATA, show_default=True)
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:N.")
@click.option("--threads", type=click.IntRange(min=1), default=None, help="Torch threads.")
@click.pass_obj
def expert_train(state: State, env_id: str, steps, out, config, options, data_root: str,
                 device: str, threads) -> None:  # fmt: skip
    """Train (or resume) an expert policy for ENV_ID, checkpointing as it goes."""
    from ssilbench.api import provides
    from ssilbench.runner.plan import parse_assignments, validate_model

    family, task_name, task = _configured_task(state, env_id, options)
    if not provides(task, "train_expert") or task.ExpertConfig is None:
        raise UsageError(f"Environment '{family}' has no expert trainer.")
    values = parse_assignments(config, "--config")
    if steps is not None:
        values["steps"] = steps
    cfg = validate_model(task.ExpertConfig, values, f"expert config of {family}:{task_name}")
    target = Path(out) if out else (
        Path(data_root).expanduser() / "experts" / family / f"{task_name}.pt")  # fmt: skip
    import torch

    from ssilbench.runner.worker import resolve_device

    if threads is not None:
        torch.set_num_threads(threads)
    task.train_expert(cfg, target, device=resolve_device(device), log=_log(state))
    click.echo(f"{family}:{task_name}: expert checkpoint at {target}")


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        code = cli.main(args=args, prog_name="ssilbench", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except SsilbenchError as exc:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    if isinstance(code, int) and code:
        sys.exit(code)


if __name__ == "__main__":
    main()


@cli.group()
def cache() -> None:
    """List or delete the trained stages kept for reuse (RESULTS/cache)."""


@cache.command("ls")
@click.option("--results", default=DEFAULT_RESULTS, show_default=True, help="Results directory.")
def cache_ls(results: str) -> None:
    """One line per kept stage (key, stage, size, last use), then one per stage being
    trained now (key, holder host and pid, age, last heartbeat)."""
    import datetime
    import time

    from ssilbench.train.memo import StageCache

    cache = StageCache(Path(results) / "cache")
    entries = cache.entries()
    for e in entries:
        when = datetime.datetime.fromtimestamp(e.last_used).isoformat(timespec="seconds")
        stage = "damaged" if e.meta.get("damaged") else e.meta.get("stage", "?")
        click.echo(f"{e.key[:12]}  {stage:<10} {e.size / 1024:9.1f} KiB  last used {when}")
    total = sum(e.size for e in entries)
    click.echo(f"{len(entries)} stage(s), {total / 2**20:.1f} MiB in {Path(results) / 'cache'}")
    leases = cache.leases()
    now = time.time()
    for info in leases:
        why = info.why_stale()
        state = f"stale: {why}" if why else f"heartbeat {now - info.heartbeat:.0f} s ago"
        age = now - (info.started or info.heartbeat)
        click.echo(f"{info.key[:12]}  training   by {info.holder} for {age / 60:.1f} min ({state})")
    if leases:
        stale = sum(info.stale() for info in leases)
        click.echo(f"{len(leases) - stale} stage(s) being trained, {stale} stale lease(s)"
                   + (" (`ssilbench cache gc` removes them)" if stale else ""))  # fmt: skip


@cache.command("gc")
@click.option("--results", default=DEFAULT_RESULTS, show_default=True, help="Results directory.")
@click.option(
    "--older-than",
    "days",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="Delete only stages not used for this many days (0: delete all).",
)
def cache_gc(results: str, days: float) -> None:
    """Delete kept stages (results already recorded are untouched) and the leases of stages
    whose trainer is gone; stages being trained now keep their leases."""
    from ssilbench.train.memo import StageCache

    cache = StageCache(Path(results) / "cache")
    stale = cache.remove_stale_leases()
    removed = cache.gc(days * 86400)
    click.echo(f"deleted {len(removed)} stage(s), {sum(e.size for e in removed) / 2**20:.1f} MiB"
               + (f", and {len(stale)} stale lease(s)" if stale else ""))  # fmt: skip


@cli.group()
def results() -> None:
    """Export a results store as JSON Lines, or merge such files into a store."""


@results.command("export")
@click.option("--results", default=DEFAULT_RESULTS, show_default=True, help="Results directory.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="File to write.")
@click.option("--all", "everything", is_flag=True, help="Failed and unfinished runs too.")
def results_export(results: str, out: str, everything: bool) -> None:
    """Write the finished runs (every column) to OUT, one JSON object per line."""
    from ssilbench.runner.exchange import export_results
    from ssilbench.runner.results_db import STATUSES, ResultsStore

    with ResultsStore(Path(results), create=False) as store:
        count = export_results(store, Path(out), STATUSES if everything else ("done",))
    click.echo(f"wrote {count} run(s) to {out}", err=True)


@results.command("merge")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--results", default=DEFAULT_RESULTS, show_default=True, help="Results directory.")
def results_merge(files: tuple[str, ...], results: str) -> None:
    """Merge exported FILES into the store: new runs are added, a run already there is kept
    once, and finished copies that disagree are reported (the store's copy stays)."""
    from ssilbench.runner.exchange import merge_results, read_export
    from ssilbench.runner.results_db import ResultsStore, ensure_writable

    batches = [(f, read_export(Path(f))) for f in files]  # every file checked before writing
    with ResultsStore(ensure_writable(Path(results))) as store:
        for name, runs in batches:
            r = merge_results(store, runs, name)
            click.echo(
                f"{name}: {r.added} added, {r.replaced} replaced an unfinished copy, "
                f"{r.identical} already here, {r.kept} kept (finished here), "
                f"{len(r.conflicts)} conflict(s)",
                err=True,
            )
            for text in r.conflicts:
                click.echo(f"  conflict: {text}", err=True)


@cli.command()
@click.option("--results", default=DEFAULT_RESULTS, show_default=True, help="Results directory.")
@click.option("--sweep", "sweep_file", default=None, type=click.Path(dir_okay=False),
              help="Count remaining runs against this sweep file.")  # fmt: skip
@click.option("--quick", is_flag=True, help="With --sweep: its [quick] variant.")
@click.option("--data-root", default=DEFAULT_DATA, show_default=True)
@click.pass_obj
def status(state: State, results: str, sweep_file, quick, data_root) -> None:
    """Progress of the sweeps writing to a results store, from any machine that sees it:
    runs done, running (where, for how long), failed and to go, with an estimate of the
    time left."""
    import socket
    import time

    from ssilbench.runner.results_db import STATUSES, ResultsStore, process_alive

    planned: set[str] | None = None
    if sweep_file is not None:
        from ssilbench.runner.sweepfile import load_sweep_file, panel_titles

        planned = set(panel_titles(state.plugins, load_sweep_file(Path(sweep_file)),
                                   Path(data_root).expanduser(), quick))  # fmt: skip
    elif quick:
        raise UsageError("--quick needs --sweep FILE.")
    with ResultsStore(Path(results), create=False) as store:
        rows = [r for r in store.rows(None) if planned is None or r["run_id"] in planned]
    # A run left 'running' by a process of this host that is gone was interrupted (the next
    # sweep marks it so); processes of other hosts cannot be checked from here.
    host = socket.gethostname()
    for r in rows:
        if r["status"] == "running" and r["host"] == host and not process_alive(r["pid"]):
            r["status"] = "interrupted"
    by = {s: [r for r in rows if r["status"] == s] for s in STATUSES}
    to_go = (len(planned) - len(by["done"])) if planned is not None else (
        len(by["running"]) + len(by["interrupted"]))  # fmt: skip
    click.echo(
        f"{len(by['done'])} done, {len(by['running'])} running, {len(by['failed'])} failed, "
        f"{len(by['interrupted'])} interrupted"
        + (f", {len(planned) - len(rows)} not started" if planned is not None else "")
    )
    now = time.time()
    groups: dict[tuple, list[dict]] = {}
    for r in by["running"]:
        groups.setdefault((r["method_label"], r["env_label"], r["host"], r["pid"]), []).append(r)
    for (method, env, host, pid), runs in sorted(groups.items(), key=lambda kv: kv[0][:2]):
        since = now - min(r["started_at"] or now for r in runs)
        click.echo(f"  running {len(runs):4d}  {method} on {env}  for {since:.0f} s "
                   f"({host}, pid {pid})")  # fmt: skip
    # The recent finishing rate covers any mix of stacking, workers and machines.
    recent = sorted(r["finished_at"] for r in by["done"] if r["finished_at"] and
                    now - r["finished_at"] < 3600)  # fmt: skip
    if to_go > 0 and len(recent) >= 2 and now > recent[0]:
        rate = len(recent) / (now - recent[0])
        click.echo(f"about {to_go / rate / 60:.0f} min to go: {to_go} runs at the last hour's "
                   f"{rate * 60:.1f} runs/min")  # fmt: skip
