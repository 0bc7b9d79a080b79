"""``ssilbench plot``, ``report`` and ``analyze``: figures and reports from the results
store (``report`` also from results exports), over :mod:`ssilbench.studies.study` and
:mod:`ssilbench.studies.analysis_output`."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.app import State
from ssilbench.cli.options import quick_option, results_option, sweep_file_option
from ssilbench.cli.outputs import guards_outputs
from ssilbench.cli.tasks import expand_envs
from ssilbench.errors import UsageError
from ssilbench.planning.values import comma_list


@click.command()
@sweep_file_option("Sweep file(s) of the studies; without it, the leaderboard's runs, one "
                   "panel per environment.", several=True, required=False)  # fmt: skip
@quick_option("With --sweep: the files' [quick] variants.")
@results_option
@click.option("--metric", default=None,
              help="Without --sweep: 'score' (normalised, the default) or an environment "
              "metric such as test_accuracy, as for leaderboard.")  # fmt: skip
@click.option("--latest", is_flag=True,
              help="Without --sweep: per cell, only the runs like the most recently finished "
              "one, as for leaderboard.")  # fmt: skip
@click.option("--out", default="figures", show_default=True, help="Folder for PNG and SVG files.")
@click.pass_obj
@guards_outputs("out")
def plot(state: State, sweeps, quick, results, metric, latest, out) -> None:
    """Draw each study's figure (score vs label budget per panel) from the results store;
    without --sweep, the finished runs that leaderboard tabulates: the metric vs N_L, one
    panel per environment, one line per method."""
    from ssilbench.cli.plot_store import needs_matplotlib, plot_store
    from ssilbench.studies.study import plot_study

    if sweeps and (metric is not None or latest):
        raise UsageError(
            "--metric and --latest apply without --sweep (a sweep file names its metric and "
            "finds its runs by design); drop them or drop --sweep."
        )
    if quick and not sweeps:
        raise UsageError(
            "--quick chooses the [quick] variants of sweep files: give --sweep FILE, or drop "
            "--quick to draw the leaderboard's runs."
        )
    needs_matplotlib()
    if not sweeps:
        written = plot_store(results, metric or "score", latest, Path(out))
    else:
        written = [w for path in sweeps
                   for w in plot_study(state.plugins, path, results, quick, Path(out))]  # fmt: skip
    for path in written:
        click.echo(f"wrote {path}", err=True)


@click.command()
@sweep_file_option("Sweep file(s) of the studies.", several=True)
@quick_option("The files' [quick] variants.")
@results_option
@click.option(
    "--from",
    "exports",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="A file of 'ssilbench results export' (.jsonl or .jsonl.gz) to read the runs from, "
    "instead of --results; may be repeated.",
)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Markdown file.")
@click.pass_obj
@guards_outputs("out")
def report(state: State, sweeps, quick, results, exports, out) -> None:
    """Write a replication report: figures, numbers and the paper's claims, checked. The runs
    come from a results store (--results) or from results exports (--from), exactly one."""
    from ssilbench.studies.study import RunSource, write_report

    # The default --results (or SSILBENCH_RESULTS) does not count: the command a report
    # prints must name where its runs came from, so one of the two is given explicitly.
    given = click.get_current_context().get_parameter_source("results")
    explicit = given is click.core.ParameterSource.COMMANDLINE
    source = RunSource(results=results if explicit else None, exports=tuple(exports))
    target, figures = write_report(state.plugins, sweeps, source, quick, out)
    click.echo(f"wrote {target} and figures in {figures}", err=True)


@click.command()
@click.option(
    "--env",
    "envs",
    required=True,
    help="Comma-separated environment ids: family:task or family:all (procgen:all).",
)
@results_option
@click.option(
    "--out",
    default=None,
    help="Folder for the figures (PNG, SVG), CSV tables and Markdown report "
    "[default: RESULTS/analysis, beside the store it reads].",
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
@guards_outputs("out")
def analyze(state: State, envs, results, out, method, baseline, by, entropy_budget) -> None:
    """The paper's Procgen analysis: return gap of METHOD over BASELINE by complexity class,
    and entropy gap vs return gap, from the results store."""
    from ssilbench.studies.analysis_output import analyze_store

    ids = comma_list(envs, "environment", "--env procgen:all")
    wanted = [f"{family}:{task}" for family, task in expand_envs(state.plugins, ids)]
    folder = Path(out) if out is not None else Path(results) / "analysis"
    text, written = analyze_store(state.plugins, ids, wanted, results, folder, method,
                                  baseline, by, entropy_budget)  # fmt: skip
    click.echo(text, nl=False)
    for path in written:
        click.echo(f"wrote {path}", err=True)
