"""The one table model every leaderboard renderer reads.

One table per environment label; rows are method labels, columns are label budgets N_L,
cells are the mean over seeds with a 95% interval and the seed count. The best mean per
column is marked. Each table names the normaliser its scores went through.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from ssilbench.data.split import budget_sort_key
from ssilbench.leaderboard.stats import mean_ci95


@dataclass
class Cell:
    mean: float
    ci95: float | None
    n: int
    best: bool = False


@dataclass
class EnvTable:
    env: str
    metric: str
    report: str
    normalisers: list[dict[str, Any]]
    budgets: list[str]
    methods: list[str]
    cells: dict[str, dict[str, Cell]] = field(default_factory=dict)  # method -> budget -> cell

    def cell(self, method: str, budget: str) -> Cell | None:
        return self.cells.get(method, {}).get(budget)


@dataclass
class Table:
    tables: list[EnvTable]

    def to_dict(self) -> dict[str, Any]:
        return {"tables": [asdict(t) for t in self.tables]}


def _value(record: dict[str, Any], metric: str) -> float | None:
    if metric == "score":
        return record.get("score")
    return (record.get("metrics") or {}).get(metric)


def _settings(record: dict[str, Any]) -> str:
    spec = record.get("spec") or {}
    parts = [f"steps={spec.get('steps')}"]
    if spec.get("stop_early"):
        parts.append("stop_early")
    return ", ".join(parts)


def _distinguish(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs of one method label trained with different step settings get separate rows, so
    that a cell only averages seeds of one setting."""
    seen: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in records:
        seen[(r["env_label"], r["method_label"])].add(_settings(r))
    out = []
    for r in records:
        if len(seen[(r["env_label"], r["method_label"])]) > 1:
            r = {**r, "method_label": f"{r['method_label']} [{_settings(r)}]"}
        out.append(r)
    return out


def build_table(records: Iterable[dict[str, Any]], metric: str = "score") -> Table:
    """Aggregate finished run records (rows of the results store) into tables."""
    records = _distinguish(list(records))
    values: dict[str, dict[str, dict[str, list[float]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list))
    )
    meta: dict[str, dict[str, Any]] = defaultdict(lambda: {"normalisers": [], "reports": set()})
    for record in records:
        value = _value(record, metric)
        if value is None:
            continue
        env = record["env_label"]
        values[env][record["method_label"]][record["budget"]].append(float(value))
        info = meta[env]
        if record.get("normaliser") and record["normaliser"] not in info["normalisers"]:
            info["normalisers"].append(record["normaliser"])
        info["reports"].add(record.get("report") or "final")

    tables = []
    for env in sorted(values):
        by_method = values[env]
        budgets = sorted({b for m in by_method.values() for b in m}, key=budget_sort_key)
        table = EnvTable(
            env=env,
            metric=metric,
            report="/".join(sorted(meta[env]["reports"])),
            normalisers=meta[env]["normalisers"] if metric == "score" else [],
            budgets=budgets,
            methods=sorted(by_method),
        )
        for method, by_budget in by_method.items():
            for budget, samples in by_budget.items():
                mean, ci = mean_ci95(samples)
                table.cells.setdefault(method, {})[budget] = Cell(mean, ci, len(samples))
        for budget in budgets:
            column = [c for m in table.methods if (c := table.cell(m, budget))]
            top = max(c.mean for c in column)
            for c in column:
                c.best = abs(c.mean - top) <= 1e-12
        tables.append(table)
    return Table(tables)
