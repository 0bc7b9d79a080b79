"""Training curves from the results store: ``ssilbench curves`` (PNG/SVG through
matplotlib) and a self-contained section of the HTML leaderboard (inline SVG).

The store keeps, per run, its training loss per stage, each evaluation's numbers
(``eval/score``, ...) and what the method logged with ``ctx.log_metric``, each series
thinned to at most 1,000 points (``ssilbench.runner.telemetry``). A series is named by its
tag ``STAGE/NAME`` (``policy/loss``, ``policy/eval/score``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

from ssilbench.errors import UsageError
from ssilbench.leaderboard.html import LegendStyle, legend
from ssilbench.outputs import atomic_path


@dataclass
class RunCurves:
    """One run's label and its series by tag."""

    run_id: str
    label: str  # "bc on maze:10x10, N_L=16, seed 0"
    method: str  # the method label
    env: str  # the environment label
    budget: str
    seed: int
    series: dict[str, tuple[list[int], list[float | None]]] = field(default_factory=dict)


@dataclass(frozen=True)
class CurveFilter:
    """Which runs: by run id (a prefix of at least 6 characters), or by method, environment,
    budget and seed (labels or names; None: any)."""

    run: str | None = None
    method: str | None = None
    env: str | None = None
    budget: str | None = None
    seed: int | None = None

    def matches(self, record: Any) -> bool:
        if self.run is not None and not record.run_id.startswith(self.run):
            return False
        if self.method is not None and self.method not in (record.method, record.method_label):
            return False
        if self.env is not None and self.env not in (record.env, record.env_label):
            return False
        if self.budget is not None and record.budget != self.budget:
            return False
        return self.seed is None or record.seed == self.seed


def load_curves(results: Path, which: CurveFilter | None = None) -> list[RunCurves]:
    """The finished runs of the store at ``results`` that ``which`` selects, with their
    curves; a UsageError when none is selected or none has curves."""
    from ssilbench.runs.store import ResultsStore

    which = which or CurveFilter()
    if which.run is not None and len(which.run) < 6:
        raise UsageError(f"--run {which.run!r}: give at least 6 characters of a run id.")
    with ResultsStore.open_read_only(Path(results)) as store:
        records = [r for r in store.rows("done") if which.matches(r)]
        curves = store.curves([r.run_id for r in records])
    if not records:
        raise UsageError(
            f"No finished run in {results} matches the selection; 'ssilbench status --results "
            f"{results}' lists the runs (drop --run/--method/--env/--budget/--seed to take all)."
        )
    runs = [_run_curves(r, curves.get(r.run_id, [])) for r in records]
    runs = [r for r in runs if r.series]
    if not runs:
        raise UsageError(
            f"The {len(records)} selected run(s) in {results} have no curves: they were "
            "recorded by an ssilbench before 0.3, or imported from an export without curves. "
            "Run them again into a new --results directory to record curves."
        )
    return runs


def _run_curves(record: Any, curves: list[dict[str, Any]]) -> RunCurves:
    run = RunCurves(
        record.run_id,
        f"{record.method_label} on {record.env_label}, N_L={record.budget}, seed {record.seed}",
        record.method_label,
        record.env_label,
        record.budget,
        record.seed,
    )
    for c in curves:
        run.series[f"{c['stage']}/{c['name']}"] = (list(c["steps"]), list(c["values"]))
    return run


def tags_of(runs: Sequence[RunCurves], wanted: Sequence[str] | None = None) -> list[str]:
    """The series to draw: ``wanted`` (each a tag, or a name such as ``loss`` or
    ``eval/score`` matching every stage's), else every tag, losses first, in first-seen
    order."""
    seen: list[str] = []
    for run in runs:
        for tag in run.series:
            if tag not in seen:
                seen.append(tag)
    if not wanted:
        return sorted(seen, key=lambda t: (not t.endswith("/loss"), seen.index(t)))
    chosen = [t for t in seen if any(t == w or t.split("/", 1)[1] == w for w in wanted)]
    missing = [w for w in wanted if not any(t == w or t.split("/", 1)[1] == w for t in seen)]
    if missing:
        raise UsageError(
            f"--series {','.join(missing)}: not recorded by the selected runs. Recorded: "
            f"{', '.join(seen)}."
        )
    return chosen


MAX_LINES = 12
"""Runs drawn per panel of ``ssilbench curves`` at most (name one with --run for others)."""


def draw_curves(runs: Sequence[RunCurves], out: Path, tags: Sequence[str] | None = None) -> Path:
    """One panel per series tag, one line per run (at most :data:`MAX_LINES`), written to
    ``out`` (.png or .svg); returns the path."""
    out = Path(out)
    if out.suffix.lower() not in (".png", ".svg"):
        raise UsageError(f"--out {out}: the file must end in .png or .svg.")
    try:
        import matplotlib
    except ImportError:
        raise UsageError(
            'Drawing curves needs matplotlib: pip install "ssilbench[plot]".'
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = tags_of(runs, tags)
    shown = list(runs)[:MAX_LINES]
    columns = min(2, len(chosen))
    rows = math.ceil(len(chosen) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(6.4 * columns, 3.6 * rows), squeeze=False)
    for ax, tag in zip(axes.flat, chosen, strict=False):
        for index, run in enumerate(shown):  # a run keeps its colour in every panel
            if tag not in run.series:
                continue
            steps, values = run.series[tag]
            xs = [s for s, v in zip(steps, values, strict=True) if v is not None]
            ys = [v for v in values if v is not None]
            ax.plot(xs, ys, marker="." if len(xs) < 30 else None, label=run.label, linewidth=1,
                    color=f"C{index % 10}")  # fmt: skip
        ax.set_title(tag)
        ax.set_xlabel("step")
        if tag.endswith("/loss") and _positive(runs, tag):
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(chosen) :]:
        ax.axis("off")
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=f"C{i % 10}") for i in range(len(shown))]
    labels = [run.label for run in shown]
    title = f"{len(shown)} of {len(runs)} runs" if len(runs) > len(shown) else ""
    fig.legend(handles, labels, loc="lower center", ncol=min(3, max(1, len(labels))),
               fontsize="small", title=title or None, frameon=False)  # fmt: skip
    fig.tight_layout(rect=(0, 0.04 + 0.03 * math.ceil(len(labels) / 3), 1, 1))
    metadata = {"Date": None} if out.suffix.lower() == ".svg" else {"Software": None}
    try:
        # Text stays text in an SVG (searchable, and the labels a reader selects).
        with plt.rc_context({"svg.hashsalt": "ssilbench", "svg.fonttype": "none"}), \
                atomic_path(out, "Choose another --out.") as tmp:  # fmt: skip
            fig.savefig(tmp, format=out.suffix[1:].lower(), dpi=110, metadata=metadata)
    finally:
        plt.close(fig)
    return out


def _positive(runs: Sequence[RunCurves], tag: str) -> bool:
    return all(v is None or v > 0 for r in runs if tag in r.series for v in r.series[tag][1])


# -- the HTML page's section ------------------------------------------------------------------
LEGEND_CHARS = 24  # a line of the legend's 11 px text in the chart's right margin
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip


def mean_curve(runs: Sequence[RunCurves], tag: str) -> tuple[list[int], list[float]]:
    """The mean over ``runs`` of series ``tag`` at each step any of them recorded (the runs
    present at that step)."""
    sums: dict[int, list[float]] = {}
    for run in runs:
        steps, values = run.series.get(tag, ([], []))
        for s, v in zip(steps, values, strict=True):
            if v is not None:
                sums.setdefault(s, []).append(v)
    steps = sorted(sums)
    return steps, [sum(sums[s]) / len(sums[s]) for s in steps]


def _svg_chart(title: str, lines: list[tuple[str, list[int], list[float]]], log_y: bool) -> str:
    """A line chart as inline SVG (no script, no external file)."""
    width, height, left, right, top, bottom = 640, 260, 58, 170, 26, 34
    points = [(x, y) for _, xs, ys in lines for x, y in zip(xs, ys, strict=True)
              if not log_y or y > 0]  # fmt: skip
    if not points:
        return ""

    def ty(y: float) -> float:
        return math.log10(y) if log_y else y

    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(ty(p[1]) for p in points), max(ty(p[1]) for p in points)
    if x1 == x0:  # one step (one evaluation): the points stand in the middle
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        pad = abs(y0) * 0.05 + 1e-6
        y0, y1 = y0 - pad, y1 + pad

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (width - left - right)

    def py(y: float) -> float:
        return height - bottom - (ty(y) - y0) / (y1 - y0) * (height - top - bottom)

    def label(v: float) -> str:
        return f"{10**v:.3g}" if log_y else f"{v:.3g}"

    style = LegendStyle(width - right + 8, top + 8, 11, LEGEND_CHARS, 13, 16, 16, 2)
    keys, legend_end = legend([(name, _COLOURS[i % len(_COLOURS)], "")
                               for i, (name, _, _) in enumerate(lines)], style)  # fmt: skip
    tall = max(height, math.ceil(legend_end))  # a long legend lengthens the chart, never cut
    parts = [f'<svg viewBox="0 0 {width} {tall}" width="{width}" role="img" '
             f'aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
             f'<text x="{left}" y="16" font-size="13" font-weight="bold">{escape(title)}</text>',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" '
             f'y2="{height - bottom}" stroke="#888"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#888"/>',
             f'<text x="{left}" y="{height - 18}" font-size="11">{x0}</text>',
             f'<text x="{width - right}" y="{height - 18}" font-size="11" '
             f'text-anchor="end">{x1} steps</text>',
             f'<text x="{left - 4}" y="{height - bottom}" font-size="11" '
             f'text-anchor="end">{label(y0)}</text>',
             f'<text x="{left - 4}" y="{top + 10}" font-size="11" '
             f'text-anchor="end">{label(y1)}</text>']  # fmt: skip
    for i, (name, xs, ys) in enumerate(lines):
        colour = _COLOURS[i % len(_COLOURS)]
        shown = [(px(x), py(y)) for x, y in zip(xs, ys, strict=True) if not log_y or y > 0]
        coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in shown)
        parts.append(f'<polyline class="series" fill="none" stroke="{colour}" '
                     f'stroke-width="1.5" points="{coords}"><title>{escape(name)}</title>'
                     "</polyline>")  # fmt: skip
        if len(shown) == 1:  # one evaluation: a line of one point draws nothing
            x, y = shown[0]
            parts.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3.5" '
                         f'fill="{colour}"><title>{escape(name)}</title></circle>')  # fmt: skip
    parts.append(keys)
    parts.append("</svg>")
    return "".join(parts)


def curves_section(runs: Sequence[RunCurves], tags: Sequence[str] = ("loss", "eval/score")) -> str:
    """The HTML page's "Training curves" section: per environment, per series (the training
    loss of each stage, the evaluation score), one line per method and budget (the mean over
    its seeds). Empty when no run has curves."""
    if not runs:
        return ""
    parts = ["<h2>Training curves</h2>",
             "<p class=note>From the results store's curves (each series thinned to at most "
             "1,000 points): the mean over seeds per method and N_L; hover a line for its "
             "name. <code>ssilbench curves</code> draws any run's.</p>"]  # fmt: skip
    for env in dict.fromkeys(r.env for r in runs):
        mine = [r for r in runs if r.env == env]
        try:
            chosen = tags_of(mine, [t for t in tags if any(
                k == t or k.split("/", 1)[1] == t for r in mine for k in r.series)])  # fmt: skip
        except UsageError:
            continue
        figures = []
        for tag in chosen:
            groups: dict[tuple[str, str], list[RunCurves]] = {}
            for run in mine:
                if tag in run.series:
                    groups.setdefault((run.method, run.budget), []).append(run)
            lines = [(f"{m} N_L={b}", *mean_curve(g, tag)) for (m, b), g in groups.items()]
            svg = _svg_chart(f"{env}: {tag}", lines[: len(_COLOURS)],
                             tag.endswith("/loss") and all(y > 0 for _, _, ys in lines
                                                           for y in ys))  # fmt: skip
            if svg:
                figures.append(f"<figure>{svg}</figure>")
        if figures:
            parts.append(f"<h3>{escape(env)}</h3>" + "".join(figures))
    return "\n".join(parts) if len(parts) > 2 else ""


def store_curves_section(results: Path) -> str:
    """:func:`curves_section` of every finished run of the store with curves ("" if none)."""
    try:
        return curves_section(load_curves(results))
    except UsageError:
        return ""
