"""``ssilbench plot`` without ``--sweep``: the leaderboard's runs (the same store, ``--metric``
and ``--latest``, through :func:`ssilbench.leaderboard.board.store_table`) drawn as the figure
of a sweep file's study (:func:`ssilbench.studies.figures.draw`): one panel per environment,
the metric against N_L (the mean number of labeled transitions or demonstrations of each
budget's runs, as the HTML page draws it), one line per method label with the band of its
95% interval over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ssilbench.errors import UsageError, safe_file_name

if TYPE_CHECKING:
    from ssilbench.leaderboard.table import Table
    from ssilbench.studies.figures import Panel


def needs_matplotlib() -> None:
    """One clear message where the [plot] extra is missing, before anything is read."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError('Figures need matplotlib: pip install "ssilbench[plot]".') from None


def table_panels(table: Table) -> list[Panel]:
    """One panel per environment table, one series per method with its cells' values by
    seed, keyed by the budget's N_L count (budgets without one are left out, as the HTML
    figure leaves them out)."""
    from ssilbench.studies.figures import Panel, Series

    panels = []
    for t in table.tables:
        panel = Panel(t.env)
        for method in t.methods:
            series = Series(method)
            for budget in t.budgets:
                cell, n_labeled = t.cell(method, budget), t.n_labeled.get(budget, 0)
                key = str(round(n_labeled))
                # Two budgets of one size ('all' and 1.0) are one point: the first is drawn.
                if cell is None or n_labeled <= 0 or key in series.points:
                    continue
                series.points[key] = list(cell.values)
                series.seeds[key] = list(cell.seeds)
            if series.points:
                panel.series[method] = series
        if panel.series:
            panels.append(panel)
    return panels


def plot_store(results: str, metric: str, latest: bool, folder: Path) -> list[Path]:
    """Draw the figure of the store's finished runs into ``folder`` as
    ``leaderboard-METRIC.png`` and ``.svg``; the files written."""
    from ssilbench.leaderboard.board import store_table
    from ssilbench.studies.figures import draw

    table = store_table(results, metric, None, latest)
    panels = table_panels(table)
    if not panels:
        raise UsageError(
            f"No finished runs with a number of labeled transitions in {results}: run a sweep "
            "first (ssilbench run ...), or pass the --results it used."
        )
    units = {t.unit for t in table.tables}
    unit = "demonstrations" if units == {"demonstrations"} else "transitions"
    title = f"{metric} vs N_L: the finished runs of {results}" + (" (latest)" if latest else "")
    return draw(panels, title, metric, f"N_L (labeled {unit})",
                folder / f"leaderboard-{safe_file_name(metric)}")  # fmt: skip
