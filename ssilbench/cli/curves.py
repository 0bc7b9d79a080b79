"""``ssilbench curves``: draw runs' training curves from the results store
(over :mod:`ssilbench.leaderboard.curves`)."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.options import results_option
from ssilbench.cli.outputs import guards_outputs


@click.command()
@results_option
@click.option("--run", "run_id", default=None, help="A run id (its first 6+ characters).")
@click.option("--method", default=None, help="Only runs of this method (name or label).")
@click.option("--env", default=None, help="Only runs of this environment (id or label).")
@click.option("--budget", default=None, help="Only runs of this label budget N_L.")
@click.option("--seed", type=int, default=None, help="Only runs of this seed.")
@click.option("--series", default=None,
              help="Comma-separated series: tags (policy/loss) or names (loss, eval/score); "
              "default: all.")  # fmt: skip
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="The figure: FILE.png or FILE.svg.")  # fmt: skip
@guards_outputs("out")
def curves(results: str, run_id, method, env, budget, seed, series, out: str) -> None:
    """Draw the training losses, evaluations and logged metrics of finished runs, one panel
    per series, one line per run (needs the [plot] extra)."""
    from ssilbench.leaderboard.curves import CurveFilter, draw_curves, load_curves

    which = CurveFilter(run_id, method, env, budget, seed)
    runs = load_curves(Path(results), which)
    tags = [s.strip() for s in series.split(",") if s.strip()] if series else None
    written = draw_curves(runs, Path(out), tags)
    click.echo(f"wrote {written} ({len(runs)} run(s))", err=True)
