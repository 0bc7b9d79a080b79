"""``ssilbench results``: move runs between stores as JSON Lines."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.options import results_option


@click.group()
def results() -> None:
    """Export a results store as JSON Lines, or merge such files into a store."""


@results.command("export")
@results_option
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
@results_option
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
