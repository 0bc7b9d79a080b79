"""``ssilbench leaderboard``: click over :func:`ssilbench.leaderboard.board.store_table`."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.options import results_option
from ssilbench.errors import UsageError


@click.command()
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
@results_option
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
@click.option(
    "--latest",
    is_flag=True,
    help="Per cell, keep only the runs like the most recently finished one (runs recorded "
    "before and after a protocol, dataset or plugin change are never pooled).",
)
def leaderboard(fmt: str, out: str | None, results: str, metric: str, compare, latest) -> None:
    """Aggregate finished runs into tables: rows = methods, columns = N_L."""
    from ssilbench.leaderboard.board import store_table
    from ssilbench.leaderboard.render import render

    table = store_table(results, metric, tuple(compare) if compare else None, latest)
    text = render(table, fmt)
    if out is None:
        click.echo(text, nl=False)
        return
    target = write_replacing(Path(out), text)
    click.echo(f"wrote {target}", err=True)


def write_replacing(target: Path, text: str) -> Path:
    """Write ``text`` to ``target`` through a temporary file, so that a reader never sees
    half a table."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text)
        tmp.replace(target)
    except OSError as exc:
        raise UsageError(
            f"Cannot write {target}: {exc.strerror}. Choose another --out path."
        ) from None
    return target
