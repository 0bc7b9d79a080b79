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

from ssilbench.leaderboard.render import md_escape
from ssilbench.studies.report import ALPHA, NOT_CHECKED, Verdict

COMPARISONS = ("beats", "gap_grows")

CELLS_INTRO = (
    "Cells of the claims that compare two methods: each cell's gap (method − other; for a "
    "growing gap, its change from the panel before), its one-sided p-value for the claim, "
    "and that p-value corrected by Holm's step-down procedure over the claim's tested cells. "
    f"A cell whose corrected p-value is below {ALPHA} carries the claim on its own (the "
    f"chance of any false one among a claim's cells is at most {ALPHA}); the verdict above "
    "asks for every cell."
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


def cell_table(verdict: Verdict) -> list[str]:
    """The per-cell table of a comparing claim (empty for other checks, or with no cell)."""
    if verdict.claim.check not in COMPARISONS or not verdict.places:
        return []
    tested = [p for p in verdict.places if p.supports is not None]
    corrected = dict(zip(map(id, tested), holm([p.supports or 0.0 for p in tested]),
                         strict=True))  # fmt: skip
    lines = [
        f"Cells of “{md_escape(verdict.claim.text)}”:",
        "",
        "| cell | gap | p | p (Holm) | carries the claim |",
        "|---|---:|---:|---:|---|",
    ]
    for place in verdict.places:
        gap = "–" if place.estimate is None else f"{place.estimate:+.3f}"
        if place.supports is None:
            lines.append(f"| {md_escape(place.where)} | {gap} | no test ({place.how}) | – | – |")
            continue
        holm_p = corrected[id(place)]
        lines.append(f"| {md_escape(place.where)} | {gap} | {_p(place.supports)} | "
                     f"{_p(holm_p)} | {'yes' if holm_p < ALPHA else 'no'} |")  # fmt: skip
    return [*lines, ""]


def scope_lines(verdicts: Sequence[Verdict]) -> list[str]:
    """One line per claim whose sweep file says why it is judged at its budgets: the
    budgets it was judged at and the reason (empty when no claim has a ``scope``)."""
    scoped = [v for v in verdicts if v.claim.scope]
    if not scoped:
        return []
    lines = ["Budgets of the claims where the paper names none:", ""]
    for v in scoped:
        if v.outcome == NOT_CHECKED or not v.budgets:
            at = "not judged (not checked: see its evidence above)"
        else:
            at = "judged at N_L=" + ", ".join(v.budgets)
        lines.append(f"- “{md_escape(v.claim.text)}”: {at}. {md_escape(v.claim.scope)}")
    return [*lines, ""]
