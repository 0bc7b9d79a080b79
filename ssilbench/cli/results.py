"""``ssilbench results``: move runs between stores as JSON Lines (optionally gzipped)."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.options import results_option
from ssilbench.cli.outputs import guards_outputs


@click.group()
def results() -> None:
    """Export a results store as JSON Lines, or merge such files into a store."""


@results.command("export")
@results_option
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False),
    help="File to write; gzip-compressed when its name ends in .gz (e.g. runs.jsonl.gz).",
)
@click.option("--all", "everything", is_flag=True, help="Failed and unfinished runs too.")
@click.option(
    "--curves/--no-curves",
    default=True,
    show_default=True,
    help="Include each run's training curves (--no-curves: a smaller file; reports and "
    "leaderboards do not read them).",
)
@guards_outputs("out")
def results_export(results: str, out: str, everything: bool, curves: bool) -> None:
    """Write the finished runs (every column) to OUT, one JSON object per line, sorted by run
    id: the same runs give the same bytes. OUT ending in .gz is gzip-compressed."""
    from ssilbench.runs.exchange import export_results
    from ssilbench.runs.store import STATUSES, ResultsStore

    with ResultsStore.open_read_only(Path(results)) as store:
        count = export_results(store, Path(out), STATUSES if everything else ("done",), curves)
    click.echo(f"wrote {count} run(s) to {out}", err=True)


@results.command("merge")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@results_option
@click.option(
    "--prefer",
    type=click.Choice(["store", "incoming"]),
    default=None,
    help="Which copy of a run to keep where finished copies disagree (a conflict): the "
    "store's (the default), or the files' (a later file's over an earlier one's). Without "
    "it, a conflict makes the command exit with status 1.",
)
def results_merge(files: tuple[str, ...], results: str, prefer: str | None) -> None:
    """Merge exported FILES into the store: new runs are added, a run already there is kept
    once, and finished copies that disagree are reported as conflicts (the store's copy
    stays unless --prefer incoming). Every line of every file is checked before anything
    is written; then all files go in at once. Unfinished runs (running, interrupted) are
    recorded as interrupted: a later sweep runs them. Exit status 1 when conflicts were
    found and no --prefer chose between the copies; the merge is written either way."""
    from ssilbench.runs.exchange import merge_files, read_export
    from ssilbench.runs.store import ResultsStore, ensure_writable

    batches = [(f, read_export(Path(f))) for f in files]  # every file checked before writing
    with ResultsStore(ensure_writable(Path(results))) as store:
        summaries = merge_files(store, batches, prefer or "store")
    for (name, _), r in zip(batches, summaries, strict=True):
        click.echo(
            f"{name}: {r.added} added, {r.replaced} replaced an unfinished copy, "
            f"{r.identical} already here, {r.kept} kept (finished or running here), "
            f"{len(r.conflicts)} conflict(s)"
            + (f"; {r.unfinished} unfinished run(s) recorded as interrupted (a later sweep "
               "runs them)" if r.unfinished else ""),
            err=True,
        )  # fmt: skip
        for text in r.conflicts:
            click.echo(f"  conflict: {text}", err=True)
    conflicts = sum(len(r.conflicts) for r in summaries)
    if conflicts and prefer is None:
        click.echo(
            f"{conflicts} conflict(s): finished copies of one run disagree, and the "
            "store's copies were kept. Look at both (the run ids above), then merge again "
            "with --prefer store to keep them, or --prefer incoming to take the files' "
            "copies.",
            err=True,
        )
        raise SystemExit(1)
