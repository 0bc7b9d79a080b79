"""The leaderboard as one self-contained HTML page.

No network at view time: styles, the table-sorting script and every figure (inline SVG) are
in the page. Per environment: a sortable table (mean [95% percentile-bootstrap interval],
seed count, AUC) whose cells carry their seeds, values and provenance as tooltips, and a
sample-efficiency figure (score vs N_L, log scale, the intervals as bands). Per suite: IQM
(with AUC) and optimality-gap tables with bootstrap intervals, and a performance profile
(the fraction of runs scoring above τ, a step function, with its bootstrap band). Every name
from a plugin or a store is escaped.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass, field
from html import escape

from ssilbench.leaderboard.aggregate import BOOTSTRAP_REPS, BOOTSTRAP_SEED
from ssilbench.leaderboard.origin import origin_sentences
from ssilbench.leaderboard.stats import SEED_INTERVAL
from ssilbench.leaderboard.table import (
    Cell,
    EnvTable,
    GroupTable,
    SuiteTable,
    Table,
    group_rows,
    interval_text,
    plugins_sentence,
)

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b",
           "#e377c2", "#7f7f7f", "#bcbd22")  # fmt: skip

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
table { border-collapse: collapse; margin: .6em 0 1.2em; }
th, td { padding: .25em .7em; border-bottom: 1px solid #ddd; text-align: right;
         white-space: nowrap; }
th:first-child, td:first-child { text-align: left; }
th { cursor: pointer; user-select: none; background: #f4f4f4; }
th[aria-sort=ascending]::after { content: " \\25B2"; }
th[aria-sort=descending]::after { content: " \\25BC"; }
td.best { font-weight: bold; }
.note, .prov { color: #555; font-size: 90%; }
figure { margin: .5em 0 1.5em; }
figure svg { max-width: 100%; height: auto; font-family: system-ui, sans-serif; }
"""

# Sorts a table by the clicked column: numbers by value (the first number of the cell), text
# alphabetically; clicking again reverses. Cells without a value go last.
SCRIPT = """
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var asc = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      function key(row) {
        var cell = row.cells[col];
        var v = cell.getAttribute("data-value");
        return v === null ? cell.textContent.trim() : parseFloat(v);
      }
      rows.sort(function (a, b) {
        var x = key(a), y = key(b);
        if (typeof x === "number" && isNaN(x)) return 1;
        if (typeof y === "number" && isNaN(y)) return -1;
        if (x < y) return asc ? -1 : 1;
        if (x > y) return asc ? 1 : -1;
        return 0;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
"""


def _num(value: float | None) -> str:
    return "NaN" if value is None else f"{value:.6g}"


def _seed_list(c: Cell) -> str:
    """'seeds 0, 1, 2: 0.200, 0.400, 0.600' — the runs behind a cell, for its tooltips."""
    return (f"seed{'s' if len(c.seeds) > 1 else ''} {', '.join(map(str, c.seeds))}: "
            f"{', '.join(f'{v:.3f}' for v in c.values)}")  # fmt: skip


def _cell_text(c: Cell) -> str:
    return f"{c.mean:.3f}{interval_text(c.low, c.high)}"


def _cell_td(c: Cell | None, where: str, video: str | None = None) -> str:
    """A cell as a <td>: its mean, interval and n, its seeds and provenance as tooltip, and
    a link to a rollout of one of its runs where ``video`` is given."""
    if c is None:
        return '<td data-value="NaN">–</td>'
    title = f"{where}: {_seed_list(c)}; " + "; ".join(c.provenance)
    cls = ' class="best"' if c.best else ""
    text = f"{escape(_cell_text(c))} <span class=note>(n={c.n})</span>"
    if video is not None:
        text += f' <a href="{escape(video)}" title="a rollout of this cell">&#9654;</a>'
    return f'<td{cls} data-value="{_num(c.mean)}" title="{escape(title)}">{text}</td>'


def _group_section(g: GroupTable, t: EnvTable) -> str:
    """The per-task table of an environment whose runs record ``<metric>/<task>``."""
    head = "".join(f"<th>{escape(h)}</th>" for h in ["method", "N_L", "mean", *g.groups])
    rows = []
    for method, budget, cells in group_rows(g, t):
        tds = [f'<td data-value="{escape(method)}">{escape(method)}</td>',
               f'<td data-value="{escape(budget)}">{escape(budget)}</td>']  # fmt: skip
        for name, c in zip(["mean", *g.groups], cells, strict=True):
            tds.append(_cell_td(c, f"{method}, N_L={budget}, {name}"))
        rows.append("<tr>" + "".join(tds) + "</tr>")
    return (
        f"<h3>{escape(g.env)} — {escape(g.metric)} per task</h3>"
        f'<table class="sortable"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table><p class=note>Per task: each run's "
        f"{escape(g.metric)}/&lt;task&gt;, as mean over seeds [{escape(SEED_INTERVAL)}] "
        "(n = seeds); mean: the table above. Best mean per N_L and task in bold.</p>"
    )


def _env_table(t: EnvTable, videos: dict[tuple[str, str, str], str]) -> str:
    head = "".join(
        f"<th>{escape(h)}</th>" for h in ["method", *(f"N_L={b}" for b in t.budgets), "AUC"]
    )
    best_auc = max((v for v in t.efficiency.values() if v is not None), default=None)
    rows = []
    for method in t.methods:
        cells = [f'<td data-value="{escape(method)}">{escape(method)}</td>']
        for b in t.budgets:
            c = t.cell(method, b)
            if c is None:
                cells.append('<td data-value="NaN">–</td>')
                continue
            cells.append(_cell_td(c, f"{method}, N_L={b}", videos.get((t.env, method, b))))
        auc = t.efficiency.get(method)
        cls = ' class="best"' if auc is not None and auc == best_auc else ""
        cells.append(f'<td{cls} data-value="{_num(auc)}">'
                     f"{'–' if auc is None else f'{auc:.3f}'}</td>")  # fmt: skip
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<table class="sortable"><thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")  # fmt: skip


def _footnote(t: EnvTable) -> str:
    if t.metric == "score":
        norms = "; ".join(
            f"{n['name']}: (R − {n['low']:g}) / ({n['high']:g} − {n['low']:g})"
            + (f" — {n['source']}" if n.get("source") else "")
            for n in t.normalisers
        )
        what = f"Normalised score ({norms})."
    else:
        what = f"Metric: {t.metric} (not normalised)."
    origins = sorted({p for m in t.cells.values() for c in m.values() for p in c.provenance})
    return (
        f"<p class=note>{escape(what)} Cells: mean over seeds [{escape(SEED_INTERVAL)}] "
        f"(n = seeds), {escape(t.report)} evaluation; best mean per column in bold. Hover a "
        "cell or a point for its seeds, their values and their runs' provenance. AUC: mean "
        "score over the budgets on a log N_L scale. Figure: the means as lines, the intervals "
        f"as shaded bands.</p><p class=prov>Provenance: {escape(' | '.join(origins))}</p>"
        + (f"<p class=prov>{escape(plugins_sentence(t))}</p>" if t.plugins else "")
        + (f"<p class=prov>{escape(' '.join(origin_sentences(t.origin)))}</p>" if t.origin else "")
    )


@dataclass
class _Series:
    """One method in a chart: its line (drawing order), its band (x, low, high; empty for
    none) and its markers (x, y, tooltip)."""

    name: str
    line: list[tuple[float, float]]
    band: list[tuple[float, float, float]] = field(default_factory=list)
    markers: list[tuple[float, float, str]] = field(default_factory=list)
    radius: float = 5.0  # of the markers


# Chart geometry (px): wide enough to read at a glance on a laptop, with a legend beside
# the plot that has room for a full method label.
W, H, LEFT, RIGHT, TOP, BOTTOM = 960, 460, 72, 250, 44, 64
LEGEND_CHARS = 26  # a line of the legend's 14 px text in the RIGHT margin
# A dash pattern per series beside its colour: methods with equal results draw one line over
# the other, and the dashes keep both visible (and tell them apart without colour vision).
DASHES = ("", "9 5", "3 4", "14 4 3 4")


@dataclass(frozen=True)
class LegendStyle:
    """Where a chart's legend stands and how it is set: swatch at ``x``, first line at
    ``top``, at most ``chars`` characters a line."""

    x: float
    top: float
    font: int
    chars: int
    line_height: float
    gap: float  # from one entry's last line to the next entry
    swatch: float = 28.0
    stroke: float = 3.0


def legend_lines(label: str, chars: int) -> list[str]:
    """``label`` in lines of at most ``chars`` characters, nothing left out: broken at spaces,
    and a word longer than a line (a config without spaces) in pieces."""
    return textwrap.wrap(label, chars, break_on_hyphens=False) or [label]


def legend(entries: list[tuple[str, str, str]], style: LegendStyle) -> tuple[str, float]:
    """The legend of (label, colour, dash attribute) entries as SVG: per entry a swatch and
    the whole label, wrapped into lines (``<tspan>``), the next entry below its last line;
    and the y its last entry ends at (so that a chart grows to hold it)."""
    out, y = [], style.top
    for label, colour, dash in entries:
        lines = legend_lines(label, style.chars)
        tx = style.x + style.swatch + 6
        spans = "".join(f'<tspan x="{tx:g}" dy="{0 if i == 0 else style.line_height:g}">'
                        f"{escape(line)}</tspan>" for i, line in enumerate(lines))  # fmt: skip
        out.append(f'<g class="legend"><title>{escape(label)}</title><line x1="{style.x:g}" '
                   f'y1="{y - 4:g}" x2="{style.x + style.swatch:g}" y2="{y - 4:g}" '
                   f'stroke="{colour}" stroke-width="{style.stroke:g}"{dash}/><text '
                   f'x="{tx:g}" y="{y:g}" font-size="{style.font}">{spans}</text></g>')  # fmt: skip
        y += style.line_height * (len(lines) - 1) + style.gap
    return "".join(out), y


def _chart_legend(series: list[_Series], dashes: list[str]) -> tuple[str, float]:
    """The legend in the chart's right margin: per series its colour, dashes and name."""
    entries = [(s.name, PALETTE[k % len(PALETTE)], f' stroke-dasharray="{d}"' if d else "")
               for k, (s, d) in enumerate(zip(series, dashes, strict=True))]  # fmt: skip
    return legend(entries, LegendStyle(W - RIGHT + 12, TOP + 10, 14, LEGEND_CHARS, 17, 22))


def _chart(title: str, series: list[_Series], x_label: str, y_label: str, log_x: bool,
           x_ticks: list[float] | None = None) -> str:  # fmt: skip
    """An SVG line chart: per series a shaded band, a line and markers with tooltips."""
    xs = [x for s in series for x, _ in s.line]
    if not xs:
        return ""
    fx = (lambda v: math.log10(v)) if log_x else (lambda v: v)
    x0, x1 = min(fx(x) for x in xs), max(fx(x) for x in xs)
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    ys = [y for s in series for _, y in s.line] + [v for s in series for _, lo, hi in s.band
                                                   for v in (lo, hi)]  # fmt: skip
    y0, y1 = min(0.0, min(ys)), max(1.0, max(ys))

    def px(x: float) -> float:
        return LEFT + (fx(x) - x0) / (x1 - x0) * (W - LEFT - RIGHT)

    def py(y: float) -> float:
        return H - BOTTOM - (y - y0) / (y1 - y0) * (H - TOP - BOTTOM)

    dashes = [DASHES[k % len(DASHES)] for k in range(len(series))]
    keys, legend_end = _chart_legend(series, dashes)
    height = max(H, math.ceil(legend_end))  # a long legend lengthens the figure, never cut
    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{W}" '
           f'height="{height}" viewBox="0 0 {W} {height}" role="img" '
           f'aria-label="{escape(title)}">',
           f'<text class="title" x="{LEFT}" y="22" font-size="17" font-weight="600">'
           f"{escape(title)}</text>"]  # fmt: skip
    for i in range(6):  # horizontal grid and y ticks
        y = y0 + (y1 - y0) * i / 5
        out.append(f'<line x1="{LEFT}" y1="{py(y):.1f}" x2="{W - RIGHT}" y2="{py(y):.1f}" '
                   f'stroke="#e4e4e4"/><text class="tick" x="{LEFT - 8}" y="{py(y) + 5:.1f}" '
                   f'font-size="14" text-anchor="end">{y:.2f}</text>')  # fmt: skip
    if x_ticks is None:  # five even ticks
        x_ticks = [x0 + (x1 - x0) * i / 4 for i in range(5)]
        x_ticks = [10**x for x in x_ticks] if log_x else x_ticks
    last = -1e9
    for x in sorted(x_ticks):
        if px(x) - last < 48:  # labels closer than this would overlap
            continue
        last = px(x)
        label = f"{x:g}" if abs(x) < 1e5 else f"{x:.1e}"
        out.append(f'<line x1="{px(x):.1f}" y1="{H - BOTTOM}" x2="{px(x):.1f}" '
                   f'y2="{H - BOTTOM + 5}" stroke="#444"/><text class="tick" x="{px(x):.1f}" '
                   f'y="{H - BOTTOM + 22}" font-size="14" text-anchor="middle">'
                   f"{escape(label)}</text>")  # fmt: skip
    out.append(f'<line x1="{LEFT}" y1="{H - BOTTOM}" x2="{W - RIGHT}" y2="{H - BOTTOM}" '
               f'stroke="#444"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{H - BOTTOM}" '
               'stroke="#444"/>')  # fmt: skip
    out.append(f'<text x="{(LEFT + W - RIGHT) / 2}" y="{H - 16}" font-size="15" '
               f'text-anchor="middle">{escape(x_label)}</text>')  # fmt: skip
    mid = (TOP + H - BOTTOM) / 2
    out.append(f'<text x="20" y="{mid}" font-size="15" text-anchor="middle" '
               f'transform="rotate(-90 20 {mid})">{escape(y_label)}</text>')  # fmt: skip
    for k, s in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        name = escape(s.name)
        if s.band:
            edge = [(px(x), py(hi)) for x, _, hi in s.band]
            edge += [(px(x), py(lo)) for x, lo, _ in reversed(s.band)]
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in edge)
            out.append(f'<polygon class="band" data-series="{name}" fill="{colour}" '
                       f'fill-opacity="0.18" stroke="none" points="{path}"/>')  # fmt: skip
    for k, s in enumerate(series):  # lines over every band
        colour = PALETTE[k % len(PALETTE)]
        name = escape(s.name)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in s.line)
        dash = f' stroke-dasharray="{dashes[k]}"' if dashes[k] else ""
        out.append(f'<polyline class="series" data-series="{name}" fill="none" '
                   f'stroke="{colour}" stroke-width="2.5"{dash} points="{path}"/>')  # fmt: skip
        # A line of one point draws nothing: such a series is drawn as its point.
        markers = s.markers or [(x, y, s.name) for x, y in s.line if len(s.line) == 1]
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="{s.radius:g}" fill="{colour}">'
                f"<title>{escape(tip)}</title></circle>" for x, y, tip in markers]  # fmt: skip
    out.append(keys)
    out.append("</svg>")
    return "".join(out)


def _efficiency_figure(t: EnvTable) -> str:
    series = []
    for method in t.methods:
        points = sorted((t.n_labeled[b], b, c) for b in t.budgets
                        if (c := t.cell(method, b)) and t.n_labeled.get(b, 0) > 0)  # fmt: skip
        if not points:
            continue
        series.append(_Series(
            method,
            [(n, c.mean) for n, _, c in points],
            [(n, c.low, c.high) for n, _, c in points if c.low is not None
             and c.high is not None],
            [(n, c.mean, f"{method}, N_L={b} ({n:g} labeled): {_cell_text(c)}, n={c.n}; "
              f"{_seed_list(c)}") for n, b, c in points],
        ))  # fmt: skip
    if any(len(s.band) != len(s.line) for s in series):  # a single seed: no band there
        for s in series:
            s.band = s.band if len(s.band) == len(s.line) else []
    ticks = sorted({x for s in series for x, _ in s.line})
    unit = "demonstrations" if t.unit == "demonstrations" else "transitions"
    svg = _chart(f"{t.env}: sample efficiency", series, f"N_L (labeled {unit}, log scale)",
                 f"{t.metric}: mean and 95% interval", log_x=True, x_ticks=ticks)  # fmt: skip
    return f"<figure>{svg}</figure>" if svg else ""


def _steps(taus: list[float], values: list[float], end: float) -> list[tuple[float, float]]:
    """The corners of a step function equal to values[i] from taus[i] up to taus[i + 1]."""
    out = []
    for i, (tau, v) in enumerate(zip(taus, values, strict=True)):
        out += [(tau, v), (taus[i + 1] if i + 1 < len(taus) else end, v)]
    return out


def _profile_figure(s: SuiteTable) -> str:
    lows = [min(p.taus[1:]) for p in s.profile.values()]
    highs = [max(p.taus) for p in s.profile.values()]
    if not lows:
        return ""
    start, end = min(0.0, *lows), max(1.0, *highs)
    series = []
    for method, p in sorted(s.profile.items()):
        taus = [max(p.taus[0], start), *p.taus[1:]]
        line = _steps(taus, p.value, end)
        low, high = _steps(taus, p.low, end), _steps(taus, p.high, end)
        band = [(x, lo, hi) for (x, lo), (_, hi) in zip(low, high, strict=True)]
        runs = len(s.values.get(method, []))
        tips = [(tau, v, f"{method}: {v:.3f} of {runs} runs score above τ={tau:.3f} "
                 f"(95% band {lo:.3f}–{hi:.3f})")
                for tau, v, lo, hi in zip(taus[1:], p.value[1:], p.low[1:], p.high[1:],
                                          strict=True)]  # fmt: skip
        series.append(_Series(method, line, band, tips, radius=2.5))
    svg = _chart(f"{s.suite}: performance profile (all budgets pooled)", series,
                 "τ (score threshold)", "fraction of runs with score > τ", log_x=False)  # fmt: skip
    return f"<figure>{svg}</figure>" if svg else ""


def _suite_section(s: SuiteTable) -> str:
    parts = [f"<h2>{escape(s.suite)} — {len(s.tasks)} tasks</h2>",
             f"<p class=note>Tasks: {escape(', '.join(s.tasks))}.</p>"]  # fmt: skip
    best_auc = max((v for v in s.efficiency.values() if v is not None), default=None)
    for title, values in (("IQM", s.iqm), ("Optimality gap", s.optimality_gap)):
        auc_column = title == "IQM"  # the AUC of the IQM curve; a gap has none
        names = ["method", *(f"N_L={b}" for b in s.budgets), *(["AUC"] * auc_column)]
        head = "".join(f"<th>{escape(h)}</th>" for h in names)
        rows = []
        for method in s.methods:
            cells = [f'<td data-value="{escape(method)}">{escape(method)}</td>']
            for b in s.budgets:
                iv = values.get(method, {}).get(b)
                if iv is None:
                    cells.append('<td data-value="NaN">–</td>')
                else:
                    runs = s.runs.get(method, {}).get(b, 0)
                    tip = f"{method}, N_L={b}: {runs} runs over {len(s.tasks)} tasks"
                    interval = f"<span class=note>[{iv.low:.3f}, {iv.high:.3f}]</span>"
                    value = (f'<td data-value="{_num(iv.value)}" title="{escape(tip)}">'
                             f"{iv.value:.3f}")  # fmt: skip
                    cells.append(f"{value} {interval}</td>")
            if auc_column:
                auc = s.efficiency.get(method)
                cls = ' class="best"' if auc is not None and auc == best_auc else ""
                cells.append(f'<td{cls} data-value="{_num(auc)}">'
                             f"{'–' if auc is None else f'{auc:.3f}'}</td>")  # fmt: skip
            rows.append("<tr>" + "".join(cells) + "</tr>")
        parts.append(f"<h3>{title} ({escape(s.metric)})</h3><table class=\"sortable\"><thead>"
                     f"<tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")  # fmt: skip
    parts.append(
        f"<p class=note>95% stratified-bootstrap intervals ({BOOTSTRAP_REPS} resamples of the "
        f"runs within each task, seed {BOOTSTRAP_SEED}). AUC: mean IQM over the budgets on a "
        "log N_L scale. Performance profile: the fraction of runs (every budget pooled) "
        "scoring above τ, a step at each run's score; the band is its 95% stratified-bootstrap "
        "interval at each τ.</p>"
    )
    parts.append(_profile_figure(s))
    return "".join(parts)


def to_html(
    table: Table, curves: str = "", videos: dict[tuple[str, str, str], str] | None = None
) -> str:
    """The page, from the table model every other export reads; ``curves``: the training
    curves' section (``ssilbench.leaderboard.curves.store_curves_section``), appended;
    ``videos``: links to rollouts per cell (``ssilbench.leaderboard.videos.cell_videos``)."""
    body = ["<h1>ssilbench leaderboard</h1>"]
    if not table.tables:
        body.append("<p>No finished runs in this results store.</p>")
    for t in table.tables:
        body.append(f"<h2>{escape(t.env)}</h2>")
        body.append(_env_table(t, videos or {}))
        body.append(_footnote(t))
        body.append(_efficiency_figure(t))
        if (g := table.group_table(t.env)) is not None:
            body.append(_group_section(g, t))
    for s in table.suites:
        body.append(_suite_section(s))
    for c in table.comparisons:
        rows = "".join(
            f'<tr><td data-value="{escape(b)}">N_L={escape(b)}</td>'
            f'<td data-value="{_num(iv.value)}">{iv.value:.3f} '
            f"<span class=note>[{iv.low:.3f}, {iv.high:.3f}]</span></td></tr>"
            for b, iv in c.improvement.items()
        )
        body.append(
            f"<h2>P({escape(c.method)} &gt; {escape(c.other)}) — {escape(c.scope)}</h2>"
            '<table class="sortable"><thead><tr><th>budget</th><th>P(X &gt; Y)</th></tr>'
            f"</thead><tbody>{rows}</tbody></table><p class=note>Probability that a run of the "
            "first method scores higher than a run of the second on the same task (ties count "
            "one half), averaged over tasks; 95% stratified-bootstrap interval.</p>"
        )
    body.append(curves)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>ssilbench leaderboard</title><style>{STYLE}</style></head><body>"
        + "\n".join(body)
        + f"<script>{SCRIPT}</script></body></html>\n"
    )
