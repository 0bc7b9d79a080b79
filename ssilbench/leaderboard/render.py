"""Renderers of the table model: Markdown, CSV, JSON and LaTeX (booktabs)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ssilbench.leaderboard.aggregate import BOOTSTRAP_REPS, BOOTSTRAP_SEED, Interval
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
    plugin_rows,
    plugins_sentence,
)
from ssilbench.outputs import write_atomic

FORMATS = ("md", "csv", "json", "tex", "html")

SUITE_NOTE = (
    f"IQM: interquartile mean over every run of every task; optimality gap: mean shortfall "
    f"below 1. Intervals: 95% stratified bootstrap ({BOOTSTRAP_REPS} resamples of the runs "
    f"within each task, seed {BOOTSTRAP_SEED}). AUC: mean IQM over the budgets on a log N_L "
    f"scale."
)


def _fmt_cell(cell: Cell | None) -> str:
    if cell is None:
        return "–"
    text = f"{cell.mean:.3f}{interval_text(cell.low, cell.high)} (n={cell.n})"
    return f"**{text}**" if cell.best else text


def _fmt_interval(iv: Interval | None) -> str:
    return "–" if iv is None else f"{iv.value:.3f} [{iv.low:.3f}, {iv.high:.3f}]"


def _fmt_auc(value: float | None, best: bool = False) -> str:
    if value is None:
        return "–"
    return f"**{value:.3f}**" if best else f"{value:.3f}"


def _best(values: dict[str, float | None]) -> float | None:
    known = [v for v in values.values() if v is not None]
    return max(known) if known else None


def _budget_header(budget: str, unit: str = "transitions") -> str:
    return f"N_L={budget} demos" if unit == "demonstrations" else f"N_L={budget}"


def _footnote(table: EnvTable) -> str:
    what = "final evaluation" if table.report == "final" else f"{table.report} over training"
    lines = [md_escape(line) for line in origin_sentences(table.origin)]
    if table.metric == "score":
        for norm in table.normalisers:
            source = f" — {norm['source']}" if norm.get("source") else ""
            lines.append(
                f"Normalised score: {norm['name']}, (R − {norm['low']:g}) / "
                f"({norm['high']:g} − {norm['low']:g}){source}."
            )
    else:
        lines.append(f"Metric: {table.metric} (not normalised).")
    if table.unit == "demonstrations":
        lines.append("N_L counts whole demonstrations: D_L holds every transition of N_L "
                     "demonstrations drawn per seed.")  # fmt: skip
    lines.append(
        f"Cells: mean over seeds [{SEED_INTERVAL}] (n = seeds), {what}; best mean per column "
        "in bold. AUC: mean score over the budgets on a log N_L scale."
    )
    if table.plugins:
        lines.append(md_escape(plugins_sentence(table)))
    return "\n".join(lines)


def md_escape(text: str) -> str:
    """A name or label as literal Markdown table text: no cell break, tag, code, line, link
    or image. Escaped brackets are enough for the last two: ``[x](url)``, ``![](url)`` and
    reference links all need a bracket; ``<`` is escaped, so no autolink either."""
    for raw, escaped in (("\\", "\\\\"), ("|", "\\|"), ("`", "\\`"), ("<", "&lt;"),
                         (">", "&gt;"), ("[", "\\["), ("]", "\\]"), ("\r", " "),
                         ("\n", " ")):  # fmt: skip
        text = text.replace(raw, escaped)
    return text


def to_markdown(table: Table) -> str:
    if not table.tables:
        return "No finished runs in this results store.\n"
    parts = ["# ssilbench leaderboard\n"]
    for t in table.tables:
        header = ["method", *(_budget_header(b, t.unit) for b in t.budgets), "AUC"]
        parts.append(f"## {md_escape(t.env)}\n")
        parts.append("| " + " | ".join(header) + " |")
        parts.append("|" + "|".join(["---"] + ["---:"] * (len(t.budgets) + 1)) + "|")
        top = _best(t.efficiency)
        for method in t.methods:
            auc = t.efficiency.get(method)
            row = [md_escape(method), *(_fmt_cell(t.cell(method, b)) for b in t.budgets),
                   _fmt_auc(auc, auc is not None and auc == top)]  # fmt: skip
            parts.append("| " + " | ".join(row) + " |")
        parts.append("\n" + _footnote(t) + "\n")
        if (g := table.group_table(t.env)) is not None:
            parts.append(_groups_markdown(g, t))
    for s in table.suites:
        parts.append(_suite_markdown(s))
    for c in table.comparisons:
        parts.append(f"## P({md_escape(c.method)} > {md_escape(c.other)}) — {md_escape(c.scope)}\n")
        parts.append("| budget | P(X > Y) | 95% interval |")
        parts.append("|---|---:|---:|")
        for budget, iv in c.improvement.items():
            parts.append(f"| N_L={budget} | {iv.value:.3f} | [{iv.low:.3f}, {iv.high:.3f}] |")
        parts.append(
            "\nProbability that a run of the first method scores higher than a run of the "
            "second on the same task (ties count one half), averaged over tasks; stratified "
            "bootstrap interval.\n"
        )
    return "\n".join(parts)


def _groups_markdown(g: GroupTable, t: EnvTable) -> str:
    header = ["method", "N_L", "mean", *(md_escape(x) for x in g.groups)]
    lines = [f"### {md_escape(g.env)} — {md_escape(g.metric)} per task\n",
             "| " + " | ".join(header) + " |",
             "|" + "|".join(["---", "---"] + ["---:"] * (len(g.groups) + 1)) + "|"]  # fmt: skip
    for method, budget, cells in group_rows(g, t):
        unit = " demos" if t.unit == "demonstrations" else ""
        row = [md_escape(method), f"{budget}{unit}", *(_fmt_cell(c) for c in cells)]
        lines.append("| " + " | ".join(row) + " |")
    lines.append(
        f"\nPer task: each run's {md_escape(g.metric)}/<task>, as mean over seeds "
        f"[{SEED_INTERVAL}] (n = seeds); mean: the table above. Best mean per N_L and task "
        "in bold.\n"
    )
    return "\n".join(lines)


def _suite_markdown(s: SuiteTable) -> str:
    tasks = md_escape(", ".join(s.tasks))
    lines = [f"## {md_escape(s.suite)} — {len(s.tasks)} tasks ({tasks})\n"]
    for title, values in (("IQM", s.iqm), ("Optimality gap", s.optimality_gap)):
        auc = title == "IQM"
        header = ["method", *(_budget_header(b) for b in s.budgets), *(["AUC"] * auc)]
        lines.append(f"**{title}** ({s.metric})\n")
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
        top = _best(s.efficiency)
        for method in s.methods:
            row = [md_escape(method),
                   *(_fmt_interval(values.get(method, {}).get(b)) for b in s.budgets)]  # fmt: skip
            if auc:
                value = s.efficiency.get(method)
                row.append(_fmt_auc(value, value is not None and value == top))
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines.append(SUITE_NOTE + "\n")
    return "\n".join(lines)


# What makes a spreadsheet read a cell as a formula (OWASP, "CSV injection").
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")


def csv_cell(value: object) -> object:
    """A CSV cell that a spreadsheet shows as text: a text that would start a formula gets a
    leading apostrophe (OWASP's advice); numbers, and text that reads as one, stay as
    they are. A carriage return becomes a line feed, which the writer quotes (it quotes
    only the characters of its line terminator, and a bare one splits the row)."""
    if not isinstance(value, str):
        return value
    value = value.replace("\r\n", "\n").replace("\r", "\n")
    if not value.startswith(FORMULA_STARTS):
        return value
    try:
        float(value)
    except ValueError:
        return "'" + value
    return value


class SafeWriter:
    """``csv.writer`` whose every cell goes through :func:`csv_cell`."""

    def __init__(self, out: io.StringIO) -> None:
        self._writer = csv.writer(out, lineterminator="\n")

    def writerow(self, row: list[object]) -> None:
        self._writer.writerow([csv_cell(v) for v in row])


def to_csv(table: Table) -> str:
    out = io.StringIO()
    writer = SafeWriter(out)
    writer.writerow(
        ["kind", "env", "method", "budget", "metric", "statistic", "mean", "low", "high",
         "n", "seeds", "best", "auc", "normaliser"]
    )  # fmt: skip
    for t in table.tables:
        norm = "; ".join(n["name"] for n in t.normalisers)
        for method in t.methods:
            auc = t.efficiency.get(method)
            for budget in t.budgets:
                cell = t.cell(method, budget)
                if cell is None:
                    continue
                low, high = cell.low, cell.high
                writer.writerow(
                    ["task", t.env, method, budget, t.metric, "mean", f"{cell.mean:.6g}",
                     "" if low is None else f"{low:.6g}", "" if high is None else f"{high:.6g}",
                     cell.n, " ".join(map(str, cell.seeds)), int(cell.best),
                     "" if auc is None else f"{auc:.6g}", norm]
                )  # fmt: skip
    for g in table.groups:
        t = table.env_table(g.env)
        norm = "; ".join(n["name"] for n in t.normalisers) if t else ""
        for method in g.methods:
            for budget in g.budgets:
                for group in g.groups:
                    cell = g.cell(method, budget, group)
                    if cell is None:
                        continue
                    low, high = cell.low, cell.high
                    writer.writerow(
                        ["group", g.env, method, budget, f"{g.metric}/{group}", "mean",
                         f"{cell.mean:.6g}", "" if low is None else f"{low:.6g}",
                         "" if high is None else f"{high:.6g}", cell.n,
                         " ".join(map(str, cell.seeds)), int(cell.best), "", norm]
                    )  # fmt: skip
    for c in table.comparisons:
        for budget, iv in c.improvement.items():
            writer.writerow(
                ["comparison", c.scope, f"{c.method} > {c.other}", budget, "",
                 "probability_of_improvement", f"{iv.value:.6g}", f"{iv.low:.6g}",
                 f"{iv.high:.6g}", "", "", "", "", ""]
            )  # fmt: skip
    for s in table.suites:
        for statistic, values in (("iqm", s.iqm), ("optimality_gap", s.optimality_gap)):
            for method in s.methods:
                auc = s.efficiency.get(method) if statistic == "iqm" else None
                for budget, iv in values.get(method, {}).items():
                    writer.writerow(
                        ["suite", s.suite, method, budget, s.metric, statistic,
                         f"{iv.value:.6g}", f"{iv.low:.6g}", f"{iv.high:.6g}",
                         s.runs[method][budget], "", "", "" if auc is None else f"{auc:.6g}",
                         ""]
                    )  # fmt: skip
    for row in plugin_rows(table):
        writer.writerow(row)
    for t in table.tables:  # what each table's numbers stand on: dataset, steps, protocol
        for key, text in t.origin.items():
            writer.writerow(["origin", t.env, "", "", key, text, *[""] * 8])
    return out.getvalue()


def to_json(table: Table) -> str:
    return json.dumps(table.to_dict(), indent=2) + "\n"


_TEX_SPECIALS = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
}  # fmt: skip


def tex_escape(text: str) -> str:
    """Plain text safe inside a LaTeX table cell (plugin names may contain anything)."""
    return "".join(_TEX_SPECIALS.get(ch, ch) for ch in text)


def _tex_table(caption: str, header: list[str], rows: list[list[str]]) -> str:
    spec = "l" + "r" * (len(header) - 1)
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        rf"\caption{{{caption}}}",
        rf"\begin{{tabular}}{{{spec}}}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
        *(" & ".join(r) + r" \\" for r in rows),
        r"\bottomrule",
        r"\end{tabular}",
        r"\end{table}",
    ]
    return "\n".join(lines)


def to_tex(table: Table) -> str:
    """One booktabs table per environment and per suite; best per column in bold."""
    if not table.tables:
        return "% No finished runs in this results store.\n"
    parts = ["% ssilbench leaderboard; needs \\usepackage{booktabs}"]
    for t in table.tables:
        header = ["Method", *(f"$N_L={tex_escape(b)}$" for b in t.budgets), "AUC"]
        top = _best(t.efficiency)
        rows = []
        for method in t.methods:
            row = [tex_escape(method)]
            for b in t.budgets:
                c = t.cell(method, b)
                if c is None:
                    row.append("--")
                    continue
                text = f"{c.mean:.3f}"
                text = rf"\textbf{{{text}}}" if c.best else text
                row.append(text + interval_text(c.low, c.high))
            auc = t.efficiency.get(method)
            row.append("--" if auc is None else
                       (rf"\textbf{{{auc:.3f}}}" if auc == top else f"{auc:.3f}"))  # fmt: skip
            rows.append(row)
        what = "normalised score" if t.metric == "score" else tex_escape(t.metric)
        caption = (f"{tex_escape(t.env)}: {what}, mean over seeds "
                   f"[{tex_escape(SEED_INTERVAL)}]; best mean per "
                   "column in bold. AUC: mean score over the budgets on a log $N_L$ "
                   "scale.")  # fmt: skip
        caption += "".join(" " + tex_escape(line) for line in origin_sentences(t.origin))
        if t.plugins:
            caption += " " + tex_escape(plugins_sentence(t))
        parts.append(_tex_table(caption, header, rows))
        if (g := table.group_table(t.env)) is not None:
            parts.append(_groups_tex(g, t))
    for s in table.suites:
        header = ["Method", *(f"$N_L={tex_escape(b)}$" for b in s.budgets), "AUC"]
        top = _best(s.efficiency)
        best = {b: max((s.iqm[m][b].value for m in s.methods if b in s.iqm.get(m, {})),
                       default=None) for b in s.budgets}  # fmt: skip
        rows = []
        for method in s.methods:
            cells = s.iqm.get(method, {})
            row = [tex_escape(method)]
            for b in s.budgets:
                iv = cells.get(b)
                if iv is None:
                    row.append("--")
                    continue
                value = f"{iv.value:.3f}"
                value = rf"\textbf{{{value}}}" if iv.value == best[b] else value
                row.append(f"{value} [{iv.low:.3f}, {iv.high:.3f}]")
            auc = s.efficiency.get(method)
            row.append("--" if auc is None else
                       (rf"\textbf{{{auc:.3f}}}" if auc == top else f"{auc:.3f}"))  # fmt: skip
            rows.append(row)
        caption = (f"{tex_escape(s.suite)} ({len(s.tasks)} tasks): IQM with 95\\% stratified "
                   f"bootstrap intervals ({BOOTSTRAP_REPS} resamples of the runs within each "
                   f"task, seed {BOOTSTRAP_SEED}); best per column in bold. AUC: mean IQM "
                   "over the budgets on a log $N_L$ scale.")  # fmt: skip
        parts.append(_tex_table(caption, header, rows))
    return "\n\n".join(parts) + "\n"


def _groups_tex(g: GroupTable, t: EnvTable) -> str:
    header = ["Method", "$N_L$", "Mean", *(tex_escape(x) for x in g.groups)]
    rows = []
    for method, budget, cells in group_rows(g, t):
        row = [tex_escape(method), tex_escape(budget)]
        for c in cells:
            if c is None:
                row.append("--")
                continue
            text = rf"\textbf{{{c.mean:.3f}}}" if c.best else f"{c.mean:.3f}"
            row.append(text + interval_text(c.low, c.high))
        rows.append(row)
    caption = (f"{tex_escape(g.env)}: {tex_escape(g.metric)} per task, mean over seeds "
               f"[{tex_escape(SEED_INTERVAL)}]; best mean per $N_L$ and task in "
               "bold.")  # fmt: skip
    return _tex_table(caption, header, rows)


def render(table: Table, fmt: str) -> str:
    from ssilbench.leaderboard.html import to_html

    renderers = {"md": to_markdown, "csv": to_csv, "json": to_json, "tex": to_tex, "html": to_html}
    return renderers[fmt](table)


def write_replacing(target: Path, text: str, hint: str = "") -> Path:
    """Write ``text`` to ``target`` through a temporary file of its own beside it
    (:func:`ssilbench.outputs.write_atomic`): a reader never sees half a file, a file the
    command must not overwrite is refused, and an OS error becomes one OutputError naming
    ``target`` and the cause (disk full, read-only, ...)."""
    return write_atomic(target, text, hint)
