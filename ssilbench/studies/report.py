"""Replication reports: each study's figure, its numbers and the paper's claims, checked.

A claim holds only when the seeds establish it: each check has a one-sided test at level
:data:`ALPHA` that supports the claim and one that refutes it, and its verdict is

- **held** when the supporting test succeeds everywhere the claim speaks of (every selected
  panel, every budget it names): a conjunction of tests each at level ALPHA is a test at
  level ALPHA of the conjunction, so no correction is needed;
- **not held** when the refuting test succeeds somewhere, at level ALPHA / k for k places
  (Bonferroni: one counterexample among k looks is otherwise found too easily);
- **not established** otherwise (too few seeds, too much spread, or a difference too small
  for the seeds run);
- **not checked** when the results the claim needs are missing: no selected panel has
  results of the claim's methods at every budget the check is made at. Those budgets are
  the ones the sweep file plans (for a panel built without a sweep file, the ones with
  results), so that a study still running is not judged on the budgets it happens to have:
  a panel without results of a method, or without them at one of those budgets, is left
  out, as a panel not run at all is, and the evidence names it.

The checks (seeds are the values of one method at one budget in one panel; ``EPS`` = 1e-9):

- ``reaches``: at the method's largest planned budget in each selected panel. Supports: at least two
  seeds and every seed >= threshold - EPS. Refutes: one-sample one-sided t-test of
  mean < threshold.
- ``never_reaches``: at every planned budget of each selected panel. Supports: one-sample one-sided
  t-test of mean < threshold (the one-sided 95% upper confidence bound is below the
  threshold). Refutes: at least two seeds and every seed >= threshold - EPS.
- ``beats``: at the ``budgets`` smallest budgets planned for both methods (those at most
  ``up_to`` where the claim sets it), in each selected panel.
  Supports: one-sided t-test of method > other; refutes: of other > method. Paired (the
  per-seed differences) where both methods ran the same seeds once each, since runs of one
  seed share the labeled subset; Welch's otherwise (degrees of freedom rounded down).
- ``gap_grows``: the gap (method − other, averaged over those budgets) in each selected
  panel, panel against the next. Supports: the gap of the next panel is larger; refutes: it
  is smaller. One-sided bootstrap p-values, p = (1 + #{D* <= 0}) / (R + 1) for "larger"
  and (1 + #{D* >= 0}) / (R + 1) for "smaller", over R = 2000 replicates D* of the
  difference of the two gaps, seeds resampled within each cell (jointly where paired),
  generator seeded with 0; every cell needs at least two seeds.

Without spread (every seed equal), a t statistic is undefined: a difference in the tested
direction then counts as established (p = 0), none as not (p = 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ssilbench.data.split import budget_sort_key
from ssilbench.leaderboard.aggregate import BOOTSTRAP_REPS, BOOTSTRAP_SEED
from ssilbench.leaderboard.render import md_escape
from ssilbench.leaderboard.stats import (
    SEED_INTERVAL,
    Cell,
    TTest,
    bootstrap_gap,
    one_sample_t,
    paired_t,
    welch_t,
)
from ssilbench.leaderboard.table import interval_text
from ssilbench.planning.sweepfile import Claim, SweepFile
from ssilbench.studies.cells import cell_table, cells_intro, scope_lines
from ssilbench.studies.figures import Panel, Series

ALPHA = 0.05
EPS = 1e-9
HELD, NOT_HELD, NOT_ESTABLISHED, NOT_CHECKED = (
    "held",
    "not held",
    "not established",
    "not checked",
)
OUTCOMES = (HELD, NOT_HELD, NOT_ESTABLISHED, NOT_CHECKED)
# The "held" column of the claim table.
MARKS = {HELD: "yes", NOT_HELD: "**no**", NOT_ESTABLISHED: "not established",
         NOT_CHECKED: "not checked"}  # fmt: skip

RULES = (
    "How claims are judged: a claim is held only when the seeds establish it, by one-sided "
    f"tests at level {ALPHA} everywhere it speaks of (every selected panel and budget); "
    f"not held when the opposite is established somewhere (at level {ALPHA} / k for k "
    "places); not established otherwise; not checked when its results are missing. A panel "
    "without results of a method at a budget the check needs (of those the sweep file "
    "plans) is left out, and named in the evidence. "
    "`reaches`: every seed (two or more) at the largest budget is at least the threshold; "
    "refuted by a one-sample t-test of mean < threshold. `never_reaches`: a one-sample "
    "t-test of mean < threshold at every budget; refuted where every seed (two or more) "
    "reaches it. `beats`: a t-test of method > other at each claimed budget, paired by seed "
    "where both ran the same seeds, Welch's otherwise (degrees of freedom rounded down); "
    "refuted by other > method. `gap_grows`: the gap to the other method (mean over the "
    "claimed budgets) is larger in each panel than in the one before, by a bootstrap test "
    f"({BOOTSTRAP_REPS} resamples of the seeds within each cell, seed {BOOTSTRAP_SEED}, "
    "p = (1 + #resampled differences <= 0) / (resamples + 1)); refuted where it is smaller. "
    "Every seed equal (no spread): a difference in the tested direction is established "
    "(p = 0), none is not (p = 1)."
)


@dataclass
class Verdict:
    claim: Claim
    outcome: str  # one of OUTCOMES
    evidence: str
    statistic: str = ""  # the test that decided, e.g. "p = 0.003 (paired t, n = 5)"
    places: list[Place] = field(default_factory=list)  # every test the verdict weighed
    budgets: list[str] = field(default_factory=list)  # the budgets it was judged at

    @property
    def held(self) -> bool | None:
        """True held, False not held, None not established or not checked."""
        return {HELD: True, NOT_HELD: False}.get(self.outcome)


@dataclass
class Place:
    """One place a claim speaks of (a panel, or a panel and a budget) and its tests."""

    where: str
    note: str  # the numbers, for the evidence column
    supports: float | None  # p-value for the claim; None: no test there
    refutes: float | None  # p-value against it
    how: str  # the test, e.g. "paired t, n = 5"
    estimate: float | None = None  # the gap tested (beats, gap_grows)


def p_text(p: float) -> str:
    if p == 0.0:
        return "p = 0 (no spread)"
    # Small ones in scientific notation: exact, and free of '<', which Markdown escapes.
    return f"p = {p:.1e}" if p < 0.001 else f"p = {p:.3f}"


def _selected(panels: list[Panel], claim: Claim) -> list[Panel]:
    if not claim.panels:
        return panels
    return [p for prefix in claim.panels for p in panels if p.title.startswith(prefix)]


def _decide(claim: Claim, places: list[Place], every: str, extra: str = "") -> Verdict:
    """The verdict of tests at ``places``: held when each supports the claim at ALPHA, not
    held when one refutes it at ALPHA / k; the statistic shown is the deciding test
    (``every``: what "held" means here, for the statistic)."""
    evidence = "; ".join(f"{p.where}: {p.note}" for p in places) + extra
    k = len(places)
    refuting = [p for p in places if p.refutes is not None and p.refutes < ALPHA / k]
    if refuting:
        worst = min(refuting, key=lambda p: p.refutes or 0.0)
        shown = p_text(worst.refutes or 0.0)
        bound = f", below {ALPHA}/{k}" if k > 1 else f", below {ALPHA}"
        return Verdict(claim, NOT_HELD, evidence,
                       f"against, at {worst.where}: {shown}{bound} ({worst.how})",
                       places)  # fmt: skip
    untested = [p for p in places if p.supports is None]
    if untested:
        return Verdict(claim, NOT_ESTABLISHED, evidence,
                       f"no test at {untested[0].where} ({untested[0].how})",
                       places)  # fmt: skip
    weakest = max(places, key=lambda p: p.supports or 0.0)
    outcome = HELD if (weakest.supports or 0.0) < ALPHA else NOT_ESTABLISHED
    where = f", the largest of {k}" if k > 1 else ""
    statistic = f"{p_text(weakest.supports or 0.0)} ({weakest.how}){where}"
    if outcome == HELD and every:
        statistic = every
    elif outcome == NOT_ESTABLISHED:
        statistic = f"at {weakest.where}: {statistic}"
    return Verdict(claim, outcome, evidence, statistic, places)


def _n_text(counts: list[int]) -> str:
    low, high = min(counts), max(counts)
    return f"n = {low}" if low == high else f"n = {low}–{high}"


def _reached(values: list[float], threshold: float) -> bool:
    return len(values) >= 2 and min(values) >= threshold - EPS


def _reaches(claim: Claim, chosen: list[Panel]) -> Verdict:
    places, counts = [], []
    for panel in chosen:
        series = panel.series[claim.method]
        budget = series.budgets()[-1]
        values = series.points[budget]
        below = one_sample_t(values, claim.threshold)
        hit = sum(v >= claim.threshold - EPS for v in values)
        counts.append(len(values))
        places.append(Place(
            panel.title,
            f"{below.estimate + claim.threshold:.3f} at N_L={budget}, {hit} of {len(values)} "
            f"seeds ≥ {claim.threshold:.3f}",
            0.0 if _reached(values, claim.threshold) else 1.0 if len(values) >= 2 else None,
            below.p_less, below.describe(),
        ))  # fmt: skip
    verdict = _decide(claim, places, f"every seed ≥ {claim.threshold:.3f} in {len(places)} "
                                     f"panel(s) ({_n_text(counts)})")  # fmt: skip
    if verdict.outcome == NOT_ESTABLISHED and all(p.supports is not None for p in places):
        # Reaching is a rule on the seeds, not a p-value: name the closest refutation.
        best = min(places, key=lambda p: 1.0 if p.refutes is None else p.refutes)
        p = "no test" if best.refutes is None else p_text(best.refutes)
        verdict.statistic = (f"not every seed reaches {claim.threshold:.3f}; mean below it: "
                             f"{p} at {best.where} ({best.how})")  # fmt: skip
    return verdict


def _never_reaches(claim: Claim, chosen: list[Panel]) -> Verdict:
    places = []
    for panel in chosen:
        series = panel.series[claim.method]
        for budget in series.budgets():
            values = series.points[budget]
            below = one_sample_t(values, claim.threshold)
            places.append(Place(
                f"{panel.title}, N_L={budget}",
                f"{below.estimate + claim.threshold:.3f}",
                below.p_less, 0.0 if _reached(values, claim.threshold) else 1.0,
                below.describe(),
            ))  # fmt: skip
    verdict = _decide(claim, places, "")
    if verdict.outcome == NOT_HELD:  # refuted by a rule on the seeds, not by a p-value
        where = next(p for p in places if p.refutes == 0.0)
        verdict.statistic = (f"every seed reaches {claim.threshold:.3f} at {where.where} "
                             f"({where.how})")  # fmt: skip
    verdict.evidence = _short(places, "mean")
    return verdict


def _short(places: list[Place], what: str) -> str:
    """Evidence for many budgets: per panel, the best value (the table has the rest)."""
    best: dict[str, tuple[str, str]] = {}
    for p in places:
        panel, budget = p.where.rsplit(", N_L=", 1)
        if panel not in best or float(p.note) > float(best[panel][0]):
            best[panel] = (p.note, budget)
    return "; ".join(f"{panel}: best {what} {v} (N_L={b})" for panel, (v, b) in best.items())


def _compare(mine: Series, theirs: Series, budget: str) -> TTest:
    """Method against other at one budget: paired by seed where both ran the same seeds."""
    a, b = mine.by_seed(budget), theirs.by_seed(budget)
    if a is not None and b is not None and a.keys() == b.keys() and len(a) >= 2:
        seeds = sorted(a)
        return paired_t([a[s] for s in seeds], [b[s] for s in seeds])
    return welch_t(mine.points[budget], theirs.points[budget])


def _low_budgets(claim: Claim, mine: Series, theirs: Series) -> list[str]:
    """The claim's smallest budgets planned for both methods (at most ``up_to``)."""
    theirs_planned = set(theirs.budgets())
    both = [b for b in mine.budgets() if b in theirs_planned]
    if claim.up_to is not None:
        ceiling = budget_sort_key(claim.up_to)
        both = [b for b in both if budget_sort_key(b) <= ceiling]
    return both[: claim.budgets]


def _needed(claim: Claim, panel: Panel) -> list[str]:
    """The budgets of ``panel`` the claim is judged at: the method's largest planned one
    (reaches), every planned one (never reaches), or the smallest planned for both."""
    mine = panel.series[claim.method]
    if claim.check == "reaches":
        return mine.budgets()[-1:]
    if claim.check == "never_reaches":
        return mine.budgets()
    return _low_budgets(claim, mine, panel.series[claim.other])


def _no_common_budget(claim: Claim, panel: Panel) -> Verdict:
    limit = "" if claim.up_to is None else f" at or below N_L={claim.up_to}"
    return Verdict(claim, NOT_CHECKED, f"{panel.title}: no budget both methods ran{limit}")


def _beats(claim: Claim, chosen: list[Panel]) -> Verdict:
    places = []
    for panel in chosen:
        mine, theirs = panel.series[claim.method], panel.series[claim.other]
        budgets = _low_budgets(claim, mine, theirs)
        if not budgets:
            return _no_common_budget(claim, panel)
        for budget in budgets:
            test = _compare(mine, theirs, budget)
            shown = "" if test.p_greater is None else f" ({p_text(test.p_greater)})"
            places.append(Place(f"{panel.title}, N_L={budget}", f"{test.estimate:+.3f}{shown}",
                                test.p_greater, test.p_less, test.describe(),
                                test.estimate))  # fmt: skip
    return _decide(claim, places, "")


def _cells(claim: Claim, panel: Panel) -> list[Cell]:
    mine, theirs = panel.series[claim.method], panel.series[claim.other]
    cells: list[Cell] = []
    for budget in _low_budgets(claim, mine, theirs):
        a, b = mine.by_seed(budget), theirs.by_seed(budget)
        if a is not None and b is not None and a.keys() == b.keys():
            seeds = sorted(a)
            cells.append(([a[s] for s in seeds], [b[s] for s in seeds], True))
        else:
            cells.append((mine.points[budget], theirs.points[budget], False))
    return cells


def _gap_grows(claim: Claim, chosen: list[Panel]) -> Verdict:
    if len(chosen) < 2:
        return Verdict(claim, NOT_CHECKED, "a growing gap needs two panels or more")
    per_panel = [_cells(claim, panel) for panel in chosen]
    for panel, cells in zip(chosen, per_panel, strict=True):
        if not cells:
            return _no_common_budget(claim, panel)
    gaps = [float(np.mean([np.mean(a) - np.mean(b) for a, b, _ in cells])) for cells in per_panel]
    testable = all(len(a) >= 2 and len(b) >= 2 for cells in per_panel for a, b, _ in cells)
    rng = np.random.Generator(np.random.PCG64(BOOTSTRAP_SEED))
    boots = [bootstrap_gap(cells, BOOTSTRAP_REPS, rng) for cells in per_panel] if testable else []
    places = []
    for i in range(1, len(chosen)):
        change = gaps[i] - gaps[i - 1]
        grows = shrinks = None
        if testable:
            d = boots[i] - boots[i - 1]
            grows = (1 + int(np.sum(d <= 0))) / (BOOTSTRAP_REPS + 1)
            shrinks = (1 + int(np.sum(d >= 0))) / (BOOTSTRAP_REPS + 1)
        note = f"{change:+.3f}" + ("" if grows is None else f" ({p_text(grows)})")
        seeds = _n_text([min(len(a), len(b)) for c in (per_panel[i - 1], per_panel[i])
                         for a, b, _ in c])  # fmt: skip
        how = f"bootstrap, {seeds}" if testable else f"fewer than two seeds in a cell, {seeds}"
        places.append(Place(f"{chosen[i - 1].title} → {chosen[i].title}", note, grows,
                            shrinks, how, change))  # fmt: skip
    extra = "; mean gaps in panel order: " + ", ".join(f"{g:+.3f}" for g in gaps)
    return _decide(claim, places, "", extra)


CHECKS: dict[str, Callable[[Claim, list[Panel]], Verdict]] = {
    "reaches": _reaches,
    "never_reaches": _never_reaches,
    "beats": _beats,
    "gap_grows": _gap_grows,
}


def check(claim: Claim, panels: list[Panel]) -> Verdict:
    """The verdict on ``claim`` from the seeds in ``panels`` (see the module's docstring)."""
    chosen = _selected(panels, claim)
    if not chosen:
        return Verdict(claim, NOT_CHECKED, "no panel of the results matches")
    if claim.check in ("beats", "gap_grows") and not claim.other:
        return Verdict(claim, NOT_CHECKED, f"'{claim.check}' needs the other method named")
    # A panel still running is not judged on the budgets it happens to have, nor one where a
    # method named has no results yet: like a panel not run at all, it is left out, and the
    # evidence says so.
    complete, waiting = [], []
    for panel in chosen:
        named = [claim.method, *([claim.other] if claim.other else [])]
        absent = [name for name in named if not panel.series.get(name, Series(name)).points]
        if absent:
            waiting.append(f"{panel.title} (no results of {', '.join(absent)})")
            continue
        needed = _needed(claim, panel)
        missing = [f"{name} at N_L={b}" for name in named for b in needed
                   if not panel.series[name].points.get(b)]  # fmt: skip
        if missing:
            waiting.append(f"{panel.title} (no results of {', '.join(missing)})")
        else:
            complete.append(panel)
    if not complete:
        return Verdict(claim, NOT_CHECKED, f"results missing: {'; '.join(waiting)}")
    verdict = CHECKS[claim.check](claim, complete)
    verdict.budgets = sorted({b for panel in complete for b in _needed(claim, panel)},
                             key=budget_sort_key)  # fmt: skip
    if waiting:
        verdict.evidence += f"; not judged (results missing): {'; '.join(waiting)}"
    return verdict


def _table(panel: Panel) -> list[str]:
    budgets: list[str] = []
    for series in panel.series.values():
        for b, *_ in series.summary():
            if b not in budgets:
                budgets.append(b)
    budgets.sort(key=budget_sort_key)
    lines = [
        f"**{md_escape(panel.title)}**",
        "",
        "| method | " + " | ".join(f"N_L={b}" for b in budgets) + " |",
        "|---|" + "---:|" * len(budgets),
    ]
    for series in panel.series.values():
        cells = {b: (m, lo, hi, n) for b, m, lo, hi, n in series.summary()}
        row = []
        for b in budgets:
            if b not in cells:
                row.append("–")
                continue
            m, lo, hi, n = cells[b]
            row.append(f"{m:.3f}{interval_text(lo, hi)} (n={n})")
        lines.append(f"| {md_escape(series.label)} | " + " | ".join(row) + " |")
    return [*lines, ""]


def study_section(
    sweep_file: SweepFile,
    path: str,
    panels: list[Panel],
    figure: Path | None,
    command: str,
    provenance: Sequence[str] = (),
    source: str = "the results store",
) -> tuple[list[str], list[Verdict]]:
    """A study's section of the report (``path``: the sweep file as the reader should type
    it; ``provenance``: lines on how its runs were made; ``source``: where runs are looked
    for, in words) and its verdicts."""
    verdicts = [check(claim, panels) for claim in sweep_file.claim]
    lines = [f"## {md_escape(sweep_file.title or sweep_file.name)}", ""]
    if sweep_file.description:
        lines += [sweep_file.description, ""]
    if sweep_file.variant:
        lines += [f"A variant of the paper's experiment, not the paper's: "
                  f"{md_escape(sweep_file.variant)}. Its claims are counted apart from the "
                  "paper's.", ""]  # fmt: skip
    lines += [f"Sweep file: `{path}`. Runs: `{command}`.", ""]
    for line in provenance:
        lines += [line, ""]
    if not panels:
        lines += [f"No run of this study is in {source} yet: its claims are unchecked.", ""]
    if figure is not None:
        lines += [f"![{sweep_file.name}]({figure.as_posix()})", ""]
    if verdicts:
        lines += ["| claim (paper) | held | statistic | evidence |", "|---|---|---|---|"]
        for v in verdicts:
            lines.append(f"| {md_escape(v.claim.text)} | {MARKS[v.outcome]} | "
                         f"{md_escape(v.statistic)} | {md_escape(v.evidence)} |")  # fmt: skip
        lines.append("")
    judged = [(v.claim.text, v.claim.scope, v.budgets if v.outcome != NOT_CHECKED else [])
              for v in verdicts]  # fmt: skip
    lines += scope_lines(judged)
    tables = [line for v in verdicts
              for line in cell_table(v.claim.text, v.claim.check, v.places, ALPHA)]  # fmt: skip
    if tables:
        lines += [cells_intro(ALPHA), "", *tables]
    lines.append(
        f"Metric: {sweep_file.metric}; cells: mean over seeds [{SEED_INTERVAL}] "
        "(n = seeds). The claims above are judged by the tests of the rules at the "
        "top, not by these intervals."
    )
    lines.append("")
    for panel in panels:
        lines += _table(panel)
    return lines, verdicts
