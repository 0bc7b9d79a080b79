"""Which cells carry a claim: per-cell p-values with Holm's step-down correction, and the
budgets a claim is judged at where the paper names none.

A claim's verdict is judged on all its cells together (``ssilbench.studies.report``); this
module shows them one by one. For the claims that compare two methods (``beats``,
``gap_grows``), each cell (a panel and a budget, or two panels in order) has its gap, its
one-sided p-value for the claim and that p-value corrected by Holm's step-down procedure
over the claim's tested cells: a cell whose corrected p-value is below the report's level
carries the claim on its own, with the chance of any false one among them held at that
level.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ssilbench.leaderboard.render import md_escape

COMPARISONS = ("beats", "gap_grows")


class Cell(Protocol):
    """One tested place of a claim (``ssilbench.studies.report.Place``)."""

    where: str
    supports: float | None  # the one-sided p-value for the claim; None: no test there
    how: str
    estimate: float | None


def cells_intro(alpha: float) -> str:
    return (
        "Cells of the claims that compare two methods: each cell's gap (method − other; for "
        "a growing gap, its change from the panel before), its one-sided p-value for the "
        "claim, and that p-value corrected by Holm's step-down procedure over the claim's "
        f"tested cells. A cell whose corrected p-value is below {alpha} carries the claim on "
        f"its own (the chance of any false one among a claim's cells is at most {alpha}); the "
        "verdict above asks for every cell."
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: with the m values sorted
    p(1) <= ... <= p(m), the i-th adjusted one is max over j <= i of min(1, (m - j + 1) p(j)).
    Rejecting where the adjusted value is below alpha controls the family-wise error rate
    at alpha."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def _p(p: float) -> str:
    if p == 0.0:
        return "0 (no spread)"
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def cell_table(text: str, check: str, cells: Sequence[Cell], alpha: float) -> list[str]:
    """The per-cell table of a claim (its ``text``) that compares two methods; empty for
    other checks, or with no cell."""
    if check not in COMPARISONS or not cells:
        return []
    tested = [c for c in cells if c.supports is not None]
    corrected = dict(zip(map(id, tested), holm([c.supports or 0.0 for c in tested]),
                         strict=True))  # fmt: skip
    lines = [
        f"Cells of “{md_escape(text)}”:",
        "",
        "| cell | gap | p | p (Holm) | carries the claim |",
        "|---|---:|---:|---:|---|",
    ]
    for cell in cells:
        gap = "–" if cell.estimate is None else f"{cell.estimate:+.3f}"
        if cell.supports is None:
            lines.append(f"| {md_escape(cell.where)} | {gap} | no test ({cell.how}) | – | – |")
            continue
        holm_p = corrected[id(cell)]
        lines.append(f"| {md_escape(cell.where)} | {gap} | {_p(cell.supports)} | "
                     f"{_p(holm_p)} | {'yes' if holm_p < alpha else 'no'} |")  # fmt: skip
    return [*lines, ""]


def scope_lines(claims: Sequence[tuple[str, str, Sequence[str]]]) -> list[str]:
    """One line per (claim text, scope, budgets judged at) whose sweep file says why it is
    judged at its budgets (budgets empty: not judged); empty when no claim has a scope."""
    scoped = [(text, scope, budgets) for text, scope, budgets in claims if scope]
    if not scoped:
        return []
    lines = ["Budgets of the claims where the paper names none:", ""]
    for text, scope, budgets in scoped:
        at = ("judged at N_L=" + ", ".join(budgets) if budgets
              else "not judged (not checked: see its evidence above)")  # fmt: skip
        lines.append(f"- “{md_escape(text)}”: {at}. {md_escape(scope)}")
    return [*lines, ""]
