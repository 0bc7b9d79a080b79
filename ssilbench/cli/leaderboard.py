"""``ssilbench leaderboard``: click over :func:`ssilbench.leaderboard.board.store_table`."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.options import results_option
from ssilbench.cli.outputs import guards_outputs


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
@guards_outputs("out")
def leaderboard(fmt: str, out: str | None, results: str, metric: str, compare, latest) -> None:
    """Aggregate finished runs into tables: rows = methods, columns = N_L."""
    from ssilbench.leaderboard.board import store_table
    from ssilbench.leaderboard.render import render, write_replacing

    table = store_table(results, metric, tuple(compare) if compare else None, latest)
    if fmt == "html":  # the page also shows the runs' training curves
        from ssilbench.leaderboard.curves import store_curves_section
        from ssilbench.leaderboard.html import to_html
        from ssilbench.leaderboard.videos import store_videos

        page_dir = Path(out).expanduser().parent if out is not None else None
        text = to_html(table, store_curves_section(Path(results)),
                       store_videos(Path(results), page_dir))  # fmt: skip
    else:
        text = render(table, fmt)
    if out is None:
        click.echo(text, nl=False)
        return
    target = write_replacing(Path(out), text, "Choose another --out path.")
    click.echo(f"wrote {target}", err=True)
