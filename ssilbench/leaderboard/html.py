"""The leaderboard as one self-contained HTML page.

No network at view time: styles, the table-sorting script and every figure (inline SVG) are
in the page. Per environment: a sortable table (mean ± 95% interval, seeds, AUC) whose cells
carry the provenance of their runs, and a sample-efficiency figure (score vs N_L, log
scale). Per suite: IQM and optimality-gap tables with bootstrap intervals, and a performance
profile (fraction of runs scoring above τ). Every name from a plugin or a store is escaped.
"""

from __future__ import annotations

import math
from html import escape

from ssilbench.leaderboard.aggregate import BOOTSTRAP_REPS, BOOTSTRAP_SEED
from ssilbench.leaderboard.table import EnvTable, SuiteTable, Table

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


def _env_table(t: EnvTable) -> str:
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
            text = f"{c.mean:.3f}" + (f" ± {c.ci95:.3f}" if c.ci95 is not None else "")
            title = f"{c.n} seed(s); " + "; ".join(c.provenance)
            cls = ' class="best"' if c.best else ""
            cells.append(f'<td{cls} data-value="{_num(c.mean)}" title="{escape(title)}">'
                         f"{escape(text)} <span class=note>(n={c.n})</span></td>")  # fmt: skip
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
        f"<p class=note>{escape(what)} Cells: mean over seeds ± 95% t-interval, "
        f"{escape(t.report)} evaluation; best per column in bold. Hover a cell for its runs' "
        f"provenance. AUC: mean score over the budgets on a log N_L scale.</p>"
        f"<p class=prov>Provenance: {escape(' | '.join(origins))}</p>"
    )


def _svg_lines(
    title: str,
    series: list[tuple[str, list[tuple[float, float]]]],
    x_label: str,
    y_label: str,
    log_x: bool,
) -> str:
    """A small line chart: one polyline with markers per series, axes with a few ticks."""
    w, h, left, right, top, bottom = 620, 300, 52, 250, 26, 40
    points = [p for _, pts in series for p in pts]
    if not points:
        return ""
    fx = (lambda v: math.log10(v)) if log_x else (lambda v: v)
    xs = [fx(x) for x, _ in points]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    y0, y1 = min(0.0, min(y for _, y in points)), max(1.0, max(y for _, y in points))

    def px(x: float) -> float:
        return left + (fx(x) - x0) / (x1 - x0) * (w - left - right)

    def py(y: float) -> float:
        return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
           f'viewBox="0 0 {w} {h}" role="img" aria-label="{escape(title)}">',
           f'<text x="{left}" y="16" font-size="13">{escape(title)}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" '
           'stroke="#444"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" '
           'stroke="#444"/>']  # fmt: skip
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" font-size="10" '
                   f'text-anchor="end">{y:.2f}</text>')  # fmt: skip
    ticks = sorted({x for x, _ in points}) if log_x else [x0 + (x1 - x0) * i / 4 for i in range(5)]
    for x in ticks:
        label = f"{x:g}" if not log_x or x < 1e4 else f"{x:.0e}"
        out.append(f'<text x="{px(x):.1f}" y="{h - bottom + 14}" font-size="10" '
                   f'text-anchor="middle">{escape(label)}</text>')  # fmt: skip
    out.append(f'<text x="{(left + w - right) / 2}" y="{h - 6}" font-size="11" '
               f'text-anchor="middle">{escape(x_label)}</text>')  # fmt: skip
    mid = (top + h - bottom) / 2
    out.append(f'<text x="12" y="{mid}" font-size="11" text-anchor="middle" '
               f'transform="rotate(-90 12 {mid})">{escape(y_label)}</text>')  # fmt: skip
    for k, (name, pts) in enumerate(series):
        colour = PALETTE[k % len(PALETTE)]
        pts = sorted(pts)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline class="series" data-series="{escape(name)}" fill="none" '
                   f'stroke="{colour}" stroke-width="2" points="{path}"/>')  # fmt: skip
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}">'
                f"<title>{escape(name)}: {y:.3f}</title></circle>" for x, y in pts]  # fmt: skip
        ly = top + 14 * k + 8
        out.append(f'<rect x="{w - right + 10}" y="{ly - 8}" width="10" height="10" '
                   f'fill="{colour}"/><text x="{w - right + 24}" y="{ly + 1}" font-size="10">'
                   f"{escape(name[:40])}</text>")  # fmt: skip
    out.append("</svg>")
    return "".join(out)


def _efficiency_figure(t: EnvTable) -> str:
    series = []
    for method in t.methods:
        pts = [(t.n_labeled[b], c.mean) for b in t.budgets
               if (c := t.cell(method, b)) and t.n_labeled.get(b, 0) > 0]  # fmt: skip
        if pts:
            series.append((method, pts))
    svg = _svg_lines(f"{t.env}: sample efficiency", series, "N_L (labeled transitions)",
                     t.metric, log_x=True)  # fmt: skip
    return f"<figure>{svg}</figure>" if svg else ""


def _suite_section(s: SuiteTable) -> str:
    parts = [f"<h2>{escape(s.suite)} — {len(s.tasks)} tasks</h2>",
             f"<p class=note>Tasks: {escape(', '.join(s.tasks))}.</p>"]  # fmt: skip
    for title, values in (("IQM", s.iqm), ("Optimality gap", s.optimality_gap)):
        names = ["method", *(f"N_L={b}" for b in s.budgets)]
        head = "".join(f"<th>{escape(h)}</th>" for h in names)
        rows = []
        for method in s.methods:
            cells = [f'<td data-value="{escape(method)}">{escape(method)}</td>']
            for b in s.budgets:
                iv = values.get(method, {}).get(b)
                if iv is None:
                    cells.append('<td data-value="NaN">–</td>')
                else:
                    interval = f"<span class=note>[{iv.low:.3f}, {iv.high:.3f}]</span>"
                    value = f'<td data-value="{_num(iv.value)}">{iv.value:.3f}'
                    cells.append(f"{value} {interval}</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
        parts.append(f"<h3>{title} ({escape(s.metric)})</h3><table class=\"sortable\"><thead>"
                     f"<tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")  # fmt: skip
    parts.append(
        f"<p class=note>95% stratified-bootstrap intervals ({BOOTSTRAP_REPS} resamples of the "
        f"runs within each task, seed {BOOTSTRAP_SEED}).</p>"
    )
    taus = [i / 20 for i in range(21)]
    series = [(m, [(tau, sum(v > tau for v in vals) / len(vals)) for tau in taus])
              for m, vals in sorted(s.values.items()) if vals]  # fmt: skip
    svg = _svg_lines(f"{s.suite}: performance profile (all budgets)", series, "τ",
                     "fraction of runs with score > τ", log_x=False)  # fmt: skip
    if svg:
        parts.append(f"<figure>{svg}</figure>")
    return "".join(parts)


def to_html(table: Table) -> str:
    """The page, from the table model every other export reads."""
    body = ["<h1>ssilbench leaderboard</h1>"]
    if not table.tables:
        body.append("<p>No finished runs in this results store.</p>")
    for t in table.tables:
        body.append(f"<h2>{escape(t.env)}</h2>")
        body.append(_env_table(t))
        body.append(_footnote(t))
        body.append(_efficiency_figure(t))
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
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>ssilbench leaderboard</title><style>{STYLE}</style></head><body>"
        + "\n".join(body)
        + f"<script>{SCRIPT}</script></body></html>\n"
    )
