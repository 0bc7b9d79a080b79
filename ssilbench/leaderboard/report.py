"""Replication reports: each study's figure, its numbers and the paper's claims, checked."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ssilbench.leaderboard.figures import Panel
from ssilbench.leaderboard.render import md_escape
from ssilbench.runner.sweepfile import Claim, SweepFile


@dataclass
class Verdict:
    claim: Claim
    held: bool | None  # None: the results needed to check it are missing
    evidence: str


def _selected(panels: list[Panel], claim: Claim) -> list[Panel]:
    if not claim.panels:
        return panels
    return [p for prefix in claim.panels for p in panels if p.title.startswith(prefix)]


def _means(panel: Panel, label: str) -> list[tuple[str, float]] | None:
    series = panel.series.get(label)
    return None if series is None else [(b, m) for b, m, _, _ in series.summary()]


def check(claim: Claim, panels: list[Panel]) -> Verdict:
    chosen = _selected(panels, claim)
    if not chosen:
        return Verdict(claim, None, "no panel of the results matches")
    notes, results = [], []
    gaps: list[float] = []
    for panel in chosen:
        mine = _means(panel, claim.method)
        theirs = _means(panel, claim.other) if claim.other else None
        if mine is None or (claim.other and theirs is None):
            return Verdict(claim, None, f"{panel.title}: no results for the methods named")
        if claim.check == "reaches":
            budget, value = mine[-1]
            results.append(value >= claim.threshold - 1e-9)
            notes.append(f"{panel.title}: {value:.3f} at N_L={budget}")
        elif claim.check == "never_reaches":
            best = max(value for _, value in mine)
            results.append(best < claim.threshold - 1e-9)
            notes.append(f"{panel.title}: best {best:.3f}")
        else:
            other = dict(theirs or [])
            low = [(b, v) for b, v in mine if b in other][: claim.budgets]
            diffs = [v - other[b] for b, v in low]
            if claim.check == "beats":
                results.append(bool(diffs) and all(d > 0 for d in diffs))
            gaps.append(sum(diffs) / max(1, len(diffs)))
            notes.append(
                f"{panel.title}: "
                + ", ".join(f"N_L={b}: {d:+.3f}" for (b, _), d in zip(low, diffs, strict=True))
            )
    if claim.check == "gap_grows":
        results.append(all(b >= a - 1e-9 for a, b in zip(gaps, gaps[1:], strict=False)))
        notes.append("mean gaps in panel order: " + ", ".join(f"{g:+.3f}" for g in gaps))
    return Verdict(claim, all(results), "; ".join(notes))


def _table(panel: Panel) -> list[str]:
    budgets: list[str] = []
    for series in panel.series.values():
        for b, *_ in series.summary():
            if b not in budgets:
                budgets.append(b)
    from ssilbench.data.split import budget_sort_key

    budgets.sort(key=budget_sort_key)
    lines = [
        f"**{md_escape(panel.title)}**",
        "",
        "| method | " + " | ".join(f"N_L={b}" for b in budgets) + " |",
        "|---|" + "---:|" * len(budgets),
    ]
    for series in panel.series.values():
        cells = {b: (m, c, n) for b, m, c, n in series.summary()}
        row = []
        for b in budgets:
            if b not in cells:
                row.append("–")
                continue
            m, c, n = cells[b]
            row.append(f"{m:.3f}" + (f" ± {c:.3f}" if c is not None else "") + f" (n={n})")
        lines.append(f"| {md_escape(series.label)} | " + " | ".join(row) + " |")
    return [*lines, ""]


def study_section(
    sweep_file: SweepFile, path: Path, panels: list[Panel], figure: Path | None, command: str
) -> tuple[list[str], list[Verdict]]:
    verdicts = [check(claim, panels) for claim in sweep_file.claim]
    lines = [f"## {md_escape(sweep_file.title or sweep_file.name)}", ""]
    if sweep_file.description:
        lines += [sweep_file.description, ""]
    lines += [f"Sweep file: `{path}`. Runs: `{command}`.", ""]
    if not panels:
        lines += ["No run of this study is in the results store yet: its claims are unchecked.", ""]
    if figure is not None:
        lines += [f"![{sweep_file.name}]({figure.as_posix()})", ""]
    if verdicts:
        lines += ["| claim (paper) | held | evidence |", "|---|---|---|"]
        for v in verdicts:
            mark = {True: "yes", False: "**no**", None: "not checked"}[v.held]
            lines.append(f"| {md_escape(v.claim.text)} | {mark} | {md_escape(v.evidence)} |")
        lines.append("")
    lines.append(f"Metric: {sweep_file.metric}; mean over seeds ± 95% t-interval.")
    lines.append("")
    for panel in panels:
        lines += _table(panel)
    return lines, verdicts
