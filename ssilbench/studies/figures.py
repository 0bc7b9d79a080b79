"""Figures of a sweep file's study: score against label budget, one panel per block panel and
environment, methods as lines with a band of their 95% interval over seeds (a seeded
percentile bootstrap: :func:`ssilbench.leaderboard.stats.seed_interval`). Drawn from the
results store."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ssilbench.data.split import budget_sort_key
from ssilbench.leaderboard.stats import seed_interval
from ssilbench.outputs import atomic_path

if TYPE_CHECKING:
    from ssilbench.planning.sweepfile import PanelCell
    from ssilbench.runs.records import RunRecord


@dataclass
class Series:
    """One method's curve in one panel: budget label -> per-seed values, and the seed of
    each value where known (``seeds[budget][i]`` is the seed of ``points[budget][i]``)."""

    label: str
    points: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    seeds: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    planned: set[str] = field(default_factory=set)
    """The budgets the sweep file plans for this method in this panel (empty: not known,
    taken to be those with results). A claim needs its budgets run, not merely the ones
    that happen to be there."""

    def budgets(self) -> list[str]:
        """The planned budgets (or those with results where none are known), ascending."""
        return sorted(self.planned or self.points, key=budget_sort_key)

    def by_seed(self, budget: str) -> dict[int, float] | None:
        """Seed -> value at ``budget``; None unless every value's seed is known and no seed
        has two values (then the values cannot be paired with another method's by seed)."""
        values, seeds = self.points.get(budget, []), self.seeds.get(budget, [])
        if not values or len(seeds) != len(values) or len(set(seeds)) != len(seeds):
            return None
        return dict(zip(seeds, values, strict=True))

    def summary(self) -> list[tuple[str, float, float | None, float | None, int]]:
        """Per budget, ascending: (budget, mean, low, high, n), the interval of
        :func:`seed_interval` over the values in seed order where the seeds are known."""
        rows = []
        for budget in sorted(self.points, key=budget_sort_key):
            values = self.points[budget]
            seeds = self.seeds.get(budget, [])
            if len(seeds) == len(values):  # the interval must not depend on the runs' order
                values = [v for _, v in sorted(zip(seeds, values, strict=True))]
            mean, low, high = seed_interval(values)
            rows.append((budget, mean, low, high, len(values)))
        return rows


@dataclass
class Panel:
    title: str
    series: dict[str, Series] = field(default_factory=dict)


def collect(
    records: list[RunRecord], cells: dict[str, PanelCell], metric: str, display
) -> list[Panel]:
    """Group finished run records into panels (``cells``: design id -> where its runs are
    drawn, from :func:`ssilbench.planning.sweepfile.panel_cells`); each series knows the
    budgets planned for it. Methods and values keep the order of ``records``."""
    panels: dict[str, Panel] = {}
    for record in records:
        cell = cells.get(record.design_id)
        if cell is None:
            continue
        value = record.value(metric)
        if value is None:
            continue
        panel = panels.setdefault(cell.title, Panel(cell.title))
        name = display(record.method_label)
        series = panel.series.setdefault(name, Series(name))
        series.points[record.budget].append(float(value))
        series.seeds[record.budget].append(record.seed)
    for cell in cells.values():
        drawn = panels.get(cell.title)
        series = drawn.series.get(display(cell.method_label)) if drawn is not None else None
        if series is not None:
            series.planned.add(cell.budget)
    titles = list(dict.fromkeys(cell.title for cell in cells.values()))
    return [panels[t] for t in sorted(panels, key=titles.index)]


def _x(budget: str) -> float:
    return 1.0 if budget == "all" else float(budget)


def pyplot() -> Any:
    """matplotlib's pyplot on a file-only backend, so figures draw without a display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# No creation date, no software version in the files, and SVG element ids from a fixed salt
# rather than a random one: the same figure drawn again is the same bytes, so regenerated
# figures only show up in a diff when they changed.
_METADATA = {".png": {"Date": None, "Software": None}, ".svg": {"Date": None}}
_SVG_SALT = "ssilbench"


def save(fig: Any, out: Path) -> list[Path]:
    """Write ``out``.png and ``out``.svg (the same bytes for the same figure), each through
    a temporary file renamed into place (:func:`ssilbench.outputs.atomic_path`), and close
    the figure; returns their paths."""
    plt = pyplot()
    paths = [out.with_suffix(".png"), out.with_suffix(".svg")]
    try:
        with plt.rc_context({"svg.hashsalt": _SVG_SALT}):
            for path in paths:
                with atomic_path(path) as tmp:
                    fig.savefig(tmp, format=path.suffix[1:], dpi=130,
                                metadata=_METADATA[path.suffix])  # fmt: skip
    finally:
        plt.close(fig)
    return paths


def draw(panels: list[Panel], title: str, metric: str, x_label: str, out: Path) -> list[Path]:
    """Write ``out``.png and ``out``.svg; returns their paths."""
    plt = pyplot()
    columns = min(3, max(1, len(panels)))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False, sharey=True
    )
    # One colour per method across every panel, so that the one legend is right for all.
    names = list(dict.fromkeys(name for panel in panels for name in panel.series))
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {name: palette[i % len(palette)] for i, name in enumerate(names)}
    handles = {}
    for ax, panel in zip(axes.flat, panels, strict=False):
        for series in panel.series.values():
            summary = series.summary()
            xs = [_x(b) for b, *_ in summary]
            means = [m for _, m, _, _, _ in summary]
            tint = colour[series.label]
            (handles[series.label],) = ax.plot(xs, means, marker="o", markersize=3,
                                               label=series.label, color=tint)  # fmt: skip
            ax.fill_between(
                xs,
                [m if lo is None else lo for _, m, lo, _, _ in summary],
                [m if hi is None else hi for _, m, _, hi, _ in summary],
                alpha=0.2,
                color=tint,
            )
        if any(_x(b) > 1 for s in panel.series.values() for b in s.points):
            ax.set_xscale("log", base=2)
        values = [v for s in panel.series.values() for vs in s.points.values() for v in vs]
        if values and min(values) >= 0.0 and max(values) <= 1.0:
            ax.set_ylim(-0.05, 1.05)  # scores and accuracies: keep wide intervals in frame
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel(x_label)
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(panels) :]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel(metric.replace("_", " "))
    # The legend's title says what a band is, wherever the figure is shown without its report.
    fig.legend([handles[n] for n in names], names, loc="lower center",
               ncol=min(4, len(names)), fontsize=8, frameon=False, title_fontsize=7,
               title="lines: mean over seeds; bands: 95% percentile-bootstrap interval "
                     "over seeds")  # fmt: skip
    fig.suptitle(title, fontsize=11)
    fig.tight_layout(rect=(0, 0.1, 1, 0.95))
    return save(fig, out)
