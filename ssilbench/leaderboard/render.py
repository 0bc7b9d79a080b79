"""Renderers of the table model: Markdown, CSV and JSON."""

from __future__ import annotations

import csv
import io
import json

from ssilbench.leaderboard.table import Cell, EnvTable, Table

FORMATS = ("md", "csv", "json")


def _fmt_cell(cell: Cell | None) -> str:
    if cell is None:
        return "–"
    text = f"{cell.mean:.3f}" + (f" ± {cell.ci95:.3f}" if cell.ci95 is not None else "")
    text += f" (n={cell.n})"
    return f"**{text}**" if cell.best else text


def _budget_header(budget: str) -> str:
    return f"N_L={budget}"


def _footnote(table: EnvTable) -> str:
    what = "final evaluation" if table.report == "final" else f"{table.report} over training"
    lines = []
    if table.metric == "score":
        for norm in table.normalisers:
            source = f" — {norm['source']}" if norm.get("source") else ""
            lines.append(
                f"Normalised score: {norm['name']}, (R − {norm['low']:g}) / "
                f"({norm['high']:g} − {norm['low']:g}){source}."
            )
    else:
        lines.append(f"Metric: {table.metric} (not normalised).")
    lines.append(
        f"Cells: mean over seeds ± 95% t-interval (n = seeds), {what}; best per column in bold."
    )
    return "\n".join(lines)


def to_markdown(table: Table) -> str:
    if not table.tables:
        return "No finished runs in this results store.\n"
    parts = ["# ssilbench leaderboard\n"]
    for t in table.tables:
        header = ["method", *(_budget_header(b) for b in t.budgets)]
        parts.append(f"## {t.env}\n")
        parts.append("| " + " | ".join(header) + " |")
        parts.append("|" + "|".join(["---"] + ["---:"] * len(t.budgets)) + "|")
        for method in t.methods:
            row = [method.replace("|", "\\|"), *(_fmt_cell(t.cell(method, b)) for b in t.budgets)]
            parts.append("| " + " | ".join(row) + " |")
        parts.append("\n" + _footnote(t) + "\n")
    return "\n".join(parts)


def to_csv(table: Table) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(
        ["env", "method", "budget", "metric", "mean", "ci95", "n", "best", "normaliser"]
    )
    for t in table.tables:
        norm = "; ".join(n["name"] for n in t.normalisers)
        for method in t.methods:
            for budget in t.budgets:
                cell = t.cell(method, budget)
                if cell is None:
                    continue
                writer.writerow(
                    [
                        t.env,
                        method,
                        budget,
                        t.metric,
                        f"{cell.mean:.6g}",
                        "" if cell.ci95 is None else f"{cell.ci95:.6g}",
                        cell.n,
                        int(cell.best),
                        norm,
                    ]
                )
    return out.getvalue()


def to_json(table: Table) -> str:
    return json.dumps(table.to_dict(), indent=2) + "\n"


def render(table: Table, fmt: str) -> str:
    return {"md": to_markdown, "csv": to_csv, "json": to_json}[fmt](table)
