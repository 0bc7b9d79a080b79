"""The replication report's claims, judged on the seeds: held, not held, not established,
not checked, on panels built by hand."""

from __future__ import annotations

import math

import pytest

from ssilbench.leaderboard.stats import one_sample_t, paired_t, t975, t_upper_p, welch_t
from ssilbench.planning.sweepfile import Claim, SweepFile
from ssilbench.studies.figures import Panel, Series
from ssilbench.studies.report import (
    ALPHA,
    HELD,
    NOT_CHECKED,
    NOT_ESTABLISHED,
    NOT_HELD,
    Verdict,
    check,
    study_section,
)


def series(label: str, cells: dict[str, list[float]], seeds: bool = True) -> Series:
    s = Series(label)
    for budget, values in cells.items():
        s.points[budget] = list(values)
        if seeds:
            s.seeds[budget] = list(range(len(values)))
    return s


def panel(title: str, *members: Series) -> Panel:
    return Panel(title, {s.label: s for s in members})


def claim(check_: str, **fields) -> Claim:
    return Claim(text="a claim", check=check_, method="A", **fields)


# --- the tests themselves ------------------------------------------------------------------


@pytest.mark.parametrize("df", [1, 2, 4, 7, 30])
def test_one_sided_p_at_the_tabulated_quantiles(df):
    assert t_upper_p(t975(df), df) == pytest.approx(0.025, abs=1e-4)
    assert t_upper_p(-t975(df), df) == pytest.approx(0.975, abs=1e-4)
    assert t_upper_p(0.0, df) == pytest.approx(0.5)


def test_welch_rounds_fractional_degrees_of_freedom_down():
    a, b = [0.9, 0.8, 1.0, 0.95], [0.1, 0.5]
    test = welch_t(a, b)
    va, vb = 0.0072916 / 4, 0.08 / 2
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 1)
    t = (0.9125 - 0.3) / math.sqrt(va + vb)
    assert 1 < df < 2
    assert test.p_greater == pytest.approx(t_upper_p(t, 1), rel=1e-3)
    assert test.n == "n = 4 vs 2" and test.kind == "Welch t"


def test_t_tests_agree_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    a, b = [0.61, 0.72, 0.55, 0.80, 0.66], [0.50, 0.58, 0.57, 0.62, 0.49]
    assert paired_t(a, b).p_greater == pytest.approx(
        stats.ttest_rel(a, b, alternative="greater").pvalue, rel=1e-6
    )
    assert one_sample_t(a, 0.7).p_less == pytest.approx(
        stats.ttest_1samp(a, 0.7, alternative="less").pvalue, rel=1e-6
    )
    # Equal sizes and equal spread: Welch's df is the integer 2n - 2, as scipy's.
    c, d = [1.0, 2.0, 3.0], [0.0, 1.0, 2.0]
    assert welch_t(c, d).p_greater == pytest.approx(
        stats.ttest_ind(c, d, equal_var=False, alternative="greater").pvalue, rel=1e-6
    )


def test_without_spread_the_direction_decides_and_one_value_tests_nothing():
    same = welch_t([1.0, 1.0, 1.0], [1.0, 1.0])
    assert (same.p_greater, same.p_less) == (1.0, 1.0)
    apart = paired_t([1.0, 1.0], [0.5, 0.5])
    assert (apart.p_greater, apart.p_less) == (0.0, 1.0)
    one = one_sample_t([0.3], 1.0)
    assert one.p_greater is None and one.p_less is None and one.n == "n = 1"


# --- beats -----------------------------------------------------------------------------------


def test_beats_held_paired_by_seed():
    p = panel("maze", series("A", {"0.1": [0.62, 0.70, 0.66, 0.75, 0.69]}),
              series("B", {"0.1": [0.50, 0.61, 0.55, 0.60, 0.58]}))  # fmt: skip
    v = check(claim("beats", other="B", budgets=1), [p])
    assert v.outcome == HELD and v.held is True
    assert "paired t, n = 5" in v.statistic and "maze, N_L=0.1: +0.116" in v.evidence


def test_beats_on_a_tiny_noisy_difference_is_not_established():
    # The paper's 10x10 case: +0.004 on the mean with a wide spread.
    p = panel("maze", series("A", {"0.05": [0.30, 0.55, 0.45, 0.41, 0.54]}),
              series("B", {"0.05": [0.52, 0.33, 0.40, 0.49, 0.49]}))  # fmt: skip
    v = check(claim("beats", other="B", budgets=1), [p])
    assert v.outcome == NOT_ESTABLISHED and v.held is None
    assert v.statistic.startswith("at maze, N_L=0.05: p = 0.4")


def test_beats_not_held_when_the_other_is_established_better_somewhere():
    p = panel("maze", series("A", {"0.1": [0.9, 0.8, 0.85], "0.2": [0.2, 0.25, 0.22]}),
              series("B", {"0.1": [0.5, 0.4, 0.45], "0.2": [0.9, 0.95, 0.91]}))  # fmt: skip
    v = check(claim("beats", other="B", budgets=2), [p])
    assert v.outcome == NOT_HELD and v.held is False
    assert "against, at maze, N_L=0.2" in v.statistic and ", below 0.05/2" in v.statistic


def test_beats_uses_welch_when_the_seeds_differ_and_pairs_only_the_same_seeds():
    a = series("A", {"0.1": [0.9, 0.95, 0.92]})
    b = series("B", {"0.1": [0.3, 0.35, 0.31, 0.33]})
    v = check(claim("beats", other="B", budgets=1), [panel("maze", a, b)])
    assert v.outcome == HELD and "Welch t, n = 3 vs 4" in v.statistic
    unknown = series("A", {"0.1": [0.9, 0.95, 0.92]}, seeds=False)
    b3 = series("B", {"0.1": [0.3, 0.35, 0.31]})
    v = check(claim("beats", other="B", budgets=1), [panel("maze", unknown, b3)])
    assert "Welch t, n = 3 vs 3" in v.statistic


def test_beats_with_every_seed_equal():
    both_perfect = panel("maze", series("A", {"1.0": [1.0] * 5}), series("B", {"1.0": [1.0] * 5}))
    v = check(claim("beats", other="B", budgets=1), [both_perfect])
    assert v.outcome == NOT_ESTABLISHED and "p = 1.000" in v.statistic
    apart = panel("maze", series("A", {"1.0": [1.0] * 5}), series("B", {"1.0": [0.5] * 5}))
    v = check(claim("beats", other="B", budgets=1), [apart])
    assert v.outcome == HELD and v.statistic == "p = 0 (no spread) (paired t, n = 5)"


def test_beats_with_one_seed_is_not_established():
    p = panel("maze", series("A", {"0.1": [0.9]}), series("B", {"0.1": [0.1]}))
    v = check(claim("beats", other="B", budgets=1), [p])
    assert v.outcome == NOT_ESTABLISHED
    assert v.statistic == "no test at maze, N_L=0.1 (Welch t, n = 1 vs 1)"


def test_a_missing_method_panel_or_shared_budget_is_not_checked():
    only_a = panel("maze", series("A", {"0.1": [0.9, 0.8]}))
    assert check(claim("beats", other="B"), [only_a]).outcome == NOT_CHECKED
    assert check(claim("beats", other="B", panels=["images"]), [only_a]).outcome == NOT_CHECKED
    apart = panel("maze", series("A", {"0.1": [0.9, 0.8]}), series("B", {"0.2": [0.1, 0.2]}))
    v = check(claim("beats", other="B"), [apart])
    assert v.outcome == NOT_CHECKED and "no budget both methods ran" in v.evidence
    # beside a panel with both methods, one without the other is left out and named
    both = panel("10x10", series("A", {"0.1": [0.9, 0.8]}), series("B", {"0.1": [0.1, 0.2]}))
    v = check(claim("beats", other="B"), [both, panel("20x20", *only_a.series.values())])
    assert v.outcome == HELD and "10x10, N_L=0.1" in v.evidence
    assert v.evidence.endswith("; not judged (results missing): 20x20 (no results of B)")


def test_up_to_keeps_the_low_budgets_when_fewer_are_planned():
    # A fast protocol's 0.05, 0.2, 1.0: its three smallest would include 1.0, where both
    # methods are perfect; up_to=0.2 judges the claim at 0.05 and 0.2 only.
    a = series("A", {"0.05": [0.6, 0.7, 0.65], "0.2": [0.8, 0.9, 0.85], "1.0": [1.0] * 3})
    b = series("B", {"0.05": [0.3, 0.4, 0.32], "0.2": [0.5, 0.6, 0.55], "1.0": [1.0] * 3})
    p = panel("maze", a, b)
    assert check(claim("beats", other="B", budgets=3), [p]).outcome == NOT_ESTABLISHED
    capped = check(claim("beats", other="B", budgets=3, up_to="0.2"), [p])
    assert capped.outcome == HELD and capped.budgets == ["0.05", "0.2"]
    assert "N_L=1.0" not in capped.evidence
    v = check(claim("beats", other="B", up_to="0.01"), [p])
    assert v.outcome == NOT_CHECKED
    assert v.evidence == "maze: no budget both methods ran at or below N_L=0.01"
    grows = [panel(f"p{i}", series("A", {"0.05": [g + 0.01, g - 0.01], "1.0": [1.0, 1.0]}),
                   series("B", {"0.05": [0.0, 0.0], "1.0": [1.0, 1.0]}))
             for i, g in enumerate([0.1, 0.5])]  # fmt: skip
    v = check(claim("gap_grows", other="B", up_to="0.05"), grows)
    assert v.evidence.endswith("mean gaps in panel order: +0.100, +0.500")


def planned(s: Series, *budgets: str) -> Series:
    s.planned = set(budgets)
    return s


def test_a_study_still_running_is_not_judged_on_the_budgets_it_happens_to_have():
    # the sweep plans 0.1 and 1.0; only 0.1 has run: reaching is judged at 1.0, not at 0.1
    partial = panel("50x50", planned(series("A", {"0.1": [0.4, 0.5, 0.45]}), "0.1", "1.0"))
    v = check(claim("reaches"), [partial])
    assert v.outcome == NOT_CHECKED
    assert v.evidence == "results missing: 50x50 (no results of A at N_L=1.0)"
    # beside complete panels it is left out, as a panel not run at all is, and named
    done = panel("10x10", planned(series("A", {"0.1": [0.5, 0.6], "1.0": [1.0, 1.0]}), "0.1",
                                  "1.0"))  # fmt: skip
    v = check(claim("reaches"), [done, partial])
    assert v.outcome == HELD and v.statistic == "every seed ≥ 1.000 in 1 panel(s) (n = 2)"
    assert v.evidence.endswith("; not judged (results missing): 50x50 (no results of A "
                               "at N_L=1.0)")  # fmt: skip
    # without a plan, the budgets with results are all there is
    assert check(claim("reaches"), [panel("50x50", series("A", {"0.1": [0.4, 0.5, 0.45]}))]
                 ).outcome == NOT_HELD  # fmt: skip
    assert check(claim("never_reaches"), [partial]).outcome == NOT_CHECKED
    # beats: at the smallest budgets planned for both, here 0.05 (not run by B) and 0.1
    a = planned(series("A", {"0.05": [0.9, 0.8], "0.1": [0.9, 0.9]}), "0.05", "0.1", "1.0")
    b = planned(series("B", {"0.1": [0.1, 0.2], "1.0": [1.0, 1.0]}), "0.05", "0.1", "1.0")
    v = check(claim("beats", other="B"), [panel("maze", a, b)])
    assert v.outcome == NOT_CHECKED and "no results of B at N_L=0.05" in v.evidence
    b.points["0.05"] = [0.1, 0.1]
    v = check(claim("beats", other="B"), [panel("maze", a, b)])
    assert v.outcome == HELD and "N_L=0.05" in v.evidence and "N_L=1.0" not in v.evidence


def test_collected_series_know_their_planned_budgets():
    from ssilbench.planning.sweepfile import PanelCell
    from ssilbench.runs.records import RunRecord
    from ssilbench.runs.spec import RunSpec
    from ssilbench.studies.figures import collect

    def spec(budget: str, seed: int) -> RunSpec:
        return RunSpec(method="bc", config={}, env="maze:10x10", options={}, budget=budget,
                       seed=seed, steps=60, eval_every=30)  # fmt: skip

    specs = [spec(b, seed) for b in ("0.1", "1.0") for seed in (0, 1)]
    cells = {s.design_id: PanelCell("positions: maze:10x10", "bc", s.budget) for s in specs}
    ran = [RunRecord.of(s, metrics={"acc": 0.5}) for s in specs if s.budget == "0.1"]
    [drawn] = collect(ran, cells, "acc", lambda label: label.upper())
    assert drawn.series["BC"].planned == {"0.1", "1.0"}
    assert drawn.series["BC"].budgets() == ["0.1", "1.0"] and list(drawn.series["BC"].points) == [
        "0.1"
    ]
    assert check(Claim(text="c", check="reaches", method="BC"), [drawn]).outcome == NOT_CHECKED


# --- reaches and never_reaches -------------------------------------------------------------


def test_reaches_held_when_every_seed_reaches_in_every_panel():
    panels = [panel(t, series("A", {"0.5": [0.4, 0.5], "1.0": [1.0, 1.0, 1.0]}))
              for t in ("10x10", "20x20")]  # fmt: skip
    v = check(claim("reaches"), panels)
    assert v.outcome == HELD and v.statistic == "every seed ≥ 1.000 in 2 panel(s) (n = 3)"
    assert "10x10: 1.000 at N_L=1.0, 3 of 3 seeds ≥ 1.000" in v.evidence


def test_reaches_not_held_when_the_mean_is_established_below():
    panels = [panel("10x10", series("A", {"1.0": [1.0, 1.0, 1.0]})),
              panel("images", series("A", {"1.0": [0.83, 0.80, 0.86, 0.79, 0.88]}))]  # fmt: skip
    v = check(claim("reaches"), panels)
    assert v.outcome == NOT_HELD and "against, at images" in v.statistic
    assert ", below 0.05/2 (one-sample t, n = 5)" in v.statistic


def test_reaches_not_established_when_one_seed_falls_short_or_one_seed_was_run():
    near = panel("10x10", series("A", {"1.0": [1.0, 1.0, 1.0, 1.0, 0.98]}))
    v = check(claim("reaches"), [near])
    assert v.outcome == NOT_ESTABLISHED
    assert v.statistic.startswith("not every seed reaches 1.000; mean below it: p = 0.1")
    single = panel("10x10", series("A", {"1.0": [1.0]}))
    v = check(claim("reaches"), [single])
    assert v.outcome == NOT_ESTABLISHED and "n = 1" in v.statistic


def test_never_reaches():
    low = panel("10x10", series("A", {"0.5": [0.40, 0.45, 0.47], "1.0": [0.449] * 3}))
    v = check(claim("never_reaches"), [low])
    assert v.outcome == HELD and "(one-sample t, n = 3), the largest of 2" in v.statistic
    assert v.evidence == "10x10: best mean 0.449 (N_L=1.0)"
    reached = panel("10x10", series("A", {"0.5": [0.40, 0.45, 0.47], "1.0": [1.0, 1.0]}))
    v = check(claim("never_reaches"), [reached])
    assert v.outcome == NOT_HELD
    assert v.statistic == "every seed reaches 1.000 at 10x10, N_L=1.0 (one-sample t, n = 2)"
    close = panel("10x10", series("A", {"1.0": [0.99, 1.0, 0.97]}))
    assert check(claim("never_reaches"), [close]).outcome == NOT_ESTABLISHED


# --- gap_grows -------------------------------------------------------------------------------


def gap_panels(gaps: list[float], noise: float) -> list[Panel]:
    out = []
    for i, gap in enumerate(gaps):
        base = [0.3 + noise * d for d in (-1.0, 0.5, 0.0, 1.0, -0.5)]
        jitter = [noise * d for d in (0.5, -1.0, 1.0, 0.0, -0.5)]
        a = [b + gap + j for b, j in zip(base, jitter, strict=True)]
        out.append(panel(f"p{i}", series("A", {"0.05": a, "0.1": a}),
                         series("B", {"0.05": base, "0.1": base})))  # fmt: skip
    return out


def test_gap_grows_held_not_held_and_not_established():
    grows = check(claim("gap_grows", other="B"), gap_panels([0.05, 0.3, 0.6], 0.02))
    assert grows.outcome == HELD and "(bootstrap, n = 5), the largest of 2" in grows.statistic
    assert grows.evidence.endswith("mean gaps in panel order: +0.050, +0.300, +0.600")
    shrinks = check(claim("gap_grows", other="B"), gap_panels([0.6, 0.3], 0.02))
    assert shrinks.outcome == NOT_HELD and "against, at p0 → p1" in shrinks.statistic
    noisy = check(claim("gap_grows", other="B"), gap_panels([0.10, 0.12], 0.2))
    assert noisy.outcome == NOT_ESTABLISHED
    again = check(claim("gap_grows", other="B"), gap_panels([0.10, 0.12], 0.2))
    assert again.statistic == noisy.statistic  # a seeded bootstrap


def test_gap_grows_edge_cases():
    one = gap_panels([0.1], 0.02)
    assert check(claim("gap_grows", other="B"), one).outcome == NOT_CHECKED
    single_seed = [panel(f"p{i}", series("A", {"0.1": [g]}), series("B", {"0.1": [0.0]}))
                   for i, g in enumerate([0.1, 0.5])]  # fmt: skip
    v = check(claim("gap_grows", other="B"), single_seed)
    assert v.outcome == NOT_ESTABLISHED and "fewer than two seeds in a cell" in v.statistic
    flat = [panel(f"p{i}", series("A", {"1.0": [1.0, 1.0]}), series("B", {"1.0": [0.5, 0.5]}))
            for i in range(2)]  # fmt: skip
    assert check(claim("gap_grows", other="B"), flat).outcome == NOT_ESTABLISHED


# --- the report's claim table ----------------------------------------------------------------


def test_the_claim_table_shows_the_verdict_and_the_statistic():
    sweep = SweepFile.model_validate({
        "name": "s", "metric": "test_accuracy",
        "block": [{"methods": ["bc"], "envs": ["maze:10x10"], "budgets": [1.0], "seeds": [0]}],
        "claim": [{"text": "A beats B", "check": "beats", "method": "A", "other": "B",
                   "budgets": 1},
                  {"text": "A reaches 1", "check": "reaches", "method": "A"}],
    })  # fmt: skip
    p = panel("maze", series("A", {"1.0": [1.0, 1.0, 1.0]}), series("B", {"1.0": [1.0, 1.0, 1.0]}))
    lines, verdicts = study_section(sweep, "s.toml", [p], None, "ssilbench run --sweep s.toml")
    text = "\n".join(lines)
    assert [v.outcome for v in verdicts] == [NOT_ESTABLISHED, HELD]
    assert "| claim (paper) | held | statistic | evidence |" in text
    assert "| A beats B | not established | at maze, N_L=1.0: p = 1.000 (paired t, n = 3) |" in text
    assert "| A reaches 1 | yes | every seed ≥ 1.000 in 1 panel(s) (n = 3) |" in text


# --- the cells of a claim: Holm's step-down correction ---------------------------------------


@pytest.mark.parametrize(
    ("p_values", "adjusted"),
    [
        # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1: 0.02, 0.03, 0.06, 0.04; each
        # at least the one before, so the last is 0.06; back in the order given.
        ([0.01, 0.04, 0.03, 0.005], [0.03, 0.06, 0.06, 0.02]),
        ([0.5, 0.6], [1.0, 1.0]),  # 0.5 x 2 = 1.0, capped at 1 and carried to 0.6
        ([0.02, 0.02], [0.04, 0.04]),  # ties
        ([0.3], [0.3]),  # one test: no correction
        ([], []),
    ],
)
def test_holm_adjusts_as_by_hand(p_values, adjusted):
    from ssilbench.studies.cells import holm

    assert holm(p_values) == pytest.approx(adjusted, abs=1e-12)


def test_cell_table_shows_which_cells_carry_a_claim():
    from ssilbench.studies.cells import cell_table, scope_lines

    def table(v: Verdict) -> list[str]:
        return cell_table(v.claim.text, v.claim.check, v.places, ALPHA)

    strong = {"0.1": [0.9, 0.8, 0.95, 0.85, 0.9], "0.2": [0.6, 0.62, 0.58, 0.61, 0.6]}
    weak = {"0.1": [0.5, 0.5, 0.5, 0.5, 0.5], "0.2": [0.55, 0.6, 0.57, 0.59, 0.61]}
    p = panel("maze", series("A", strong), series("B", weak))
    one = panel("other", series("A", {"0.1": [0.9]}), series("B", {"0.1": [0.5]}))
    v = check(claim("beats", other="B", scope="few labels"), [p])
    rows = [line for line in table(v) if line.startswith("| maze")]
    assert rows[0].startswith("| maze, N_L=0.1 | +0.380 | ") and rows[0].endswith(" | yes |")
    assert rows[1].startswith("| maze, N_L=0.2 | +0.018 | ") and rows[1].endswith(" | no |")
    assert scope_lines([(v.claim.text, v.claim.scope, v.budgets)]) == [
        "Budgets of the claims where the paper names none:",
        "",
        "- “a claim”: judged at N_L=0.1, 0.2. few labels",
        "",
    ]
    lonely = check(claim("beats", other="B", budgets=1), [p, one])
    assert "| other, N_L=0.1 | +0.400 | no test (" in "\n".join(table(lonely))
    assert table(check(claim("reaches"), [p])) == []  # not a comparison
    assert scope_lines([("a claim", "why", [])])[2] == (
        "- “a claim”: not judged (not checked: see its evidence above). why"
    )
    assert scope_lines([("a claim", "", ["0.1"])]) == []  # no scope, no line
