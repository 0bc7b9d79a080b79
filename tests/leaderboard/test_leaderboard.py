"""Tests of leaderboard statistics, the table model and its Markdown/CSV/JSON renderers."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from dataclasses import replace

import pytest

from ssilbench.leaderboard.render import render, to_csv, to_json, to_markdown
from ssilbench.leaderboard.stats import mean_ci95, seed_interval, t975
from ssilbench.leaderboard.table import build_table
from ssilbench.runs.records import RunRecord
from ssilbench.runs.spec import RunSpec

NORM = {"name": "success rate", "low": 0.0, "high": 1.0, "source": "rollout success"}


# --- stats -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("df", "expected", "tol"),
    [
        (1, 12.706, 1e-9),
        (2, 4.303, 1e-9),
        (4, 2.776, 1e-9),
        (10, 2.228, 1e-9),
        (30, 2.042, 1e-9),
        (31, 2.0395, 0.002),
        (40, 2.021, 0.002),
        (60, 2.000, 0.002),
        (120, 1.980, 0.002),
        (1000, 1.962, 0.002),
    ],
)
def test_t975_known_values(df, expected, tol):
    assert t975(df) == pytest.approx(expected, abs=tol)


def test_t975_decreases_towards_the_normal_quantile():
    values = [t975(df) for df in range(1, 2001)]
    assert all(a > b for a, b in zip(values[:-1], values[1:], strict=True))
    assert values[-1] > 1.959964


def test_t975_needs_a_degree_of_freedom():
    with pytest.raises(ValueError):
        t975(0)


def test_mean_ci95_by_hand():
    values = [0.2, 0.4, 0.6, 0.9]
    mean = sum(values) / 4
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 3)
    got_mean, got_ci = mean_ci95(values)
    assert got_mean == pytest.approx(0.525)
    assert got_ci == pytest.approx(3.182 * sd / 2)
    assert got_ci == pytest.approx(0.47509, abs=1e-5)


def test_mean_ci95_single_and_constant():
    assert mean_ci95([0.3]) == (0.3, None)
    assert mean_ci95([0.5, 0.5, 0.5]) == (0.5, 0.0)


def test_seed_interval_stays_in_the_seeds_range_where_the_t_interval_does_not():
    # The case of the issue: two seeds, a t-interval of ± 3.7 on a score in [0, 1].
    mean, ci = mean_ci95([0.1, 0.682])
    assert mean - ci < -3 and mean + ci > 3
    assert seed_interval([0.1, 0.682]) == pytest.approx((0.391, 0.1, 0.682))  # two seeds: range
    values = [0.9, 1.0, 1.0, 1.0, 0.2]
    m, low, high = seed_interval(values)
    assert m == pytest.approx(0.82) and 0.2 <= low < m < high <= 1.0
    assert high == 1.0 and low > 0.2  # the bootstrap's percentiles, not the raw range
    assert seed_interval(values) == (m, low, high)  # seeded: the same numbers every time
    assert seed_interval([0.5]) == (0.5, None, None)
    assert seed_interval([0.3, 0.3, 0.3]) == (0.3, 0.3, 0.3)
    with pytest.raises(ValueError):
        seed_interval([])


def test_seed_interval_is_the_bootstrap_percentile_interval():
    import numpy as np

    values = [0.2, 0.9, 0.4, 0.6]
    rng = np.random.Generator(np.random.PCG64(0))
    means = np.asarray(values)[rng.integers(0, 4, (2000, 4))].mean(axis=1)
    assert seed_interval(values)[1:] == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])))


def test_mean_ci95_empty():
    with pytest.raises(ValueError):
        mean_ci95([])


# --- the table ---------------------------------------------------------------------------


def record(
    env, method, budget, score, seed=0, metrics=None, report="final", normaliser=NORM, **columns
) -> RunRecord:
    """A finished run of ``method`` (its label too) on ``env``; ``columns`` set the rest."""
    spec = RunSpec(method=method, config={}, env=env, options={}, budget=budget, seed=seed,
                   steps=100, eval_every=50)  # fmt: skip
    return RunRecord.of(spec, score=score, metrics=metrics if metrics is not None else {},
                        report=report, normaliser=normaliser, **columns)  # fmt: skip


# maze:10x10: bc and vm_idm over budgets 16, 64, 0.5, all (vm_idm has no 0.5 cell);
# maze:20x20: one method, one seed.
SCORES = {
    ("maze:10x10", "bc", "16"): [0.2, 0.4, 0.6],
    ("maze:10x10", "bc", "64"): [0.5, 0.7],
    ("maze:10x10", "bc", "0.5"): [0.8, 0.9, 1.0],
    ("maze:10x10", "bc", "all"): [1.0, 1.0],
    ("maze:10x10", "vm_idm", "16"): [0.5, 0.6, 0.7],
    ("maze:10x10", "vm_idm", "64"): [0.3],
    ("maze:10x10", "vm_idm", "all"): [1.0, 1.0, 1.0],
    ("maze:20x20", "bc", "16"): [0.1],
}


def records():
    out = []
    for (env, method, budget), scores in SCORES.items():
        for seed, score in enumerate(scores):
            accuracy = None if seed == 1 else score / 2
            metrics = {} if accuracy is None else {"test_accuracy": accuracy}
            out.append(record(env, method, budget, score, seed, metrics))
    return out


@pytest.fixture
def table():
    return build_table(records())


def test_tables_per_environment(table):
    assert [t.env for t in table.tables] == ["maze:10x10", "maze:20x20"]
    maze10 = table.tables[0]
    assert maze10.budgets == ["16", "64", "0.5", "all"]
    assert maze10.methods == ["bc", "vm_idm"]
    assert maze10.metric == "score"
    assert maze10.report == "final"
    assert maze10.normalisers == [NORM]


def test_cells_hold_mean_ci_and_seed_count(table):
    maze10, maze20 = table.tables
    for (env, method, budget), scores in SCORES.items():
        t = maze10 if env == "maze:10x10" else maze20
        cell = t.cell(method, budget)
        mean, low, high = seed_interval(scores)
        assert cell.mean == pytest.approx(sum(scores) / len(scores))
        assert cell.mean == pytest.approx(mean)
        assert cell.n == len(scores)
        assert (cell.low, cell.high) == (low, high)
        assert (cell.low is None) == (len(scores) == 1)
        assert cell.seeds == list(range(len(scores))) and cell.values == scores
    assert (maze10.cell("bc", "16").low, maze10.cell("bc", "16").high) == pytest.approx((0.2, 0.6))
    assert maze10.cell("vm_idm", "0.5") is None


def test_a_cells_interval_does_not_depend_on_the_order_of_its_runs():
    forward = build_table(records())
    backward = build_table(list(reversed(records())))
    assert forward.to_dict() == backward.to_dict()


def test_best_per_column(table):
    maze10, maze20 = table.tables
    best = {
        (m, b)
        for m in maze10.methods
        for b in maze10.budgets
        if (c := maze10.cell(m, b)) and c.best
    }
    assert best == {
        ("vm_idm", "16"),  # 0.6 > 0.4
        ("bc", "64"),  # 0.6 > 0.3
        ("bc", "0.5"),  # alone in its column
        ("bc", "all"),  # tie at 1.0: both marked
        ("vm_idm", "all"),
    }
    assert maze20.cell("bc", "16").best


def test_markdown(table):
    md = to_markdown(table)
    assert "## maze:10x10" in md and "## maze:20x20" in md
    assert "| method | N_L=16 | N_L=64 | N_L=0.5 | N_L=all | AUC |" in md
    assert "Normalised score: success rate" in md
    assert "rollout success" in md
    vm_row = [line for line in md.splitlines() if line.startswith("| vm_idm |")][0]
    cells = [c.strip() for c in vm_row.strip("|").split("|")]
    assert cells[0] == "vm_idm"
    assert cells[1] == "**0.600 [0.500, 0.700] (n=3)**"
    assert cells[2] == "0.300 (n=1)"
    assert cells[3] == "–"  # no vm_idm run at N_L=0.5
    assert cells[4] == "**1.000 [1.000, 1.000] (n=3)**"
    assert cells[5] == "–"  # the records do not say how many transitions were labeled
    bc_row = [line for line in md.splitlines() if line.startswith("| bc |")][0]  # maze:10x10
    assert "| 0.400 [0.200, 0.600] (n=3) |" in bc_row  # not bold: vm_idm is better at 16
    assert "95% percentile-bootstrap interval: 2000 resamples of the seeds" in md


def test_markdown_escapes_pipes_in_method_labels():
    md = to_markdown(build_table([record("maze:10x10", "bc (a|b)", "16", 0.5)]))
    assert "| bc (a\\|b) |" in md


def test_markdown_of_an_empty_table():
    assert "No finished runs" in to_markdown(build_table([]))


def test_csv_parses_back(table):
    rows = [r for r in csv.DictReader(io.StringIO(to_csv(table))) if r["kind"] == "task"]
    assert len(rows) == len(SCORES)  # one row per non-missing cell
    by_key = {(r["env"], r["method"], r["budget"]): r for r in rows}
    assert set(by_key) == set(SCORES)
    for key, scores in SCORES.items():
        r = by_key[key]
        mean, low, high = seed_interval(scores)
        assert float(r["mean"]) == pytest.approx(mean, rel=1e-5)
        assert (r["low"] == "" == r["high"]) == (low is None)
        if low is not None:
            assert float(r["low"]) == pytest.approx(low, rel=1e-5, abs=1e-9)
            assert float(r["high"]) == pytest.approx(high, rel=1e-5, abs=1e-9)
        assert int(r["n"]) == len(scores)
        assert r["seeds"] == " ".join(str(s) for s in range(len(scores)))
        assert r["metric"] == "score"
        assert r["normaliser"] == "success rate"
    assert by_key[("maze:10x10", "bc", "all")]["best"] == "1"
    assert by_key[("maze:10x10", "bc", "16")]["best"] == "0"


def test_json_parses_and_matches(table):
    data = json.loads(to_json(table))
    assert data == table.to_dict()
    maze10 = data["tables"][0]
    assert maze10["env"] == "maze:10x10"
    assert maze10["budgets"] == ["16", "64", "0.5", "all"]
    assert maze10["cells"]["bc"]["64"]["mean"] == pytest.approx(0.6)
    assert maze10["cells"]["bc"]["64"]["n"] == 2
    assert maze10["cells"]["vm_idm"]["64"]["low"] is None
    assert maze10["cells"]["bc"]["64"]["seeds"] == [0, 1]
    assert "0.5" not in maze10["cells"]["vm_idm"]


def test_render_dispatches(table):
    assert render(table, "md") == to_markdown(table)
    assert render(table, "csv") == to_csv(table)
    assert render(table, "json") == to_json(table)


def test_other_metric_uses_the_records_metrics():
    table = build_table(records(), metric="test_accuracy")
    maze10 = table.tables[0]
    assert maze10.metric == "test_accuracy"
    assert maze10.normalisers == []
    for (env, method, budget), scores in SCORES.items():
        if env != "maze:10x10":
            continue
        kept = [s / 2 for seed, s in enumerate(scores) if seed != 1]  # seed 1 has no metric
        cell = maze10.cell(method, budget)
        assert cell.n == len(kept)
        assert cell.mean == pytest.approx(sum(kept) / len(kept))
    md = to_markdown(table)
    assert "Metric: test_accuracy (not normalised)" in md
    assert "Normalised score" not in md


def test_records_without_the_metric_are_ignored():
    recs = [
        record("maze:10x10", "bc", "16", 0.5, 0, {"test_accuracy": 0.25}),
        record("maze:10x10", "bc", "16", 0.7, 1, {}),
        replace(record("maze:10x10", "bc", "16", 0.9, 2), metrics=None),
        record("maze:20x20", "bc", "16", 0.9, 0, {}),
    ]
    table = build_table(recs, metric="test_accuracy")
    assert [t.env for t in table.tables] == ["maze:10x10"]
    cell = table.tables[0].cell("bc", "16")
    assert (cell.mean, cell.low, cell.n) == (0.25, None, 1)


def test_records_without_a_score_are_ignored():
    recs = [record("maze:10x10", "bc", "16", 0.5), record("maze:10x10", "bc", "16", None, 1)]
    cell = build_table(recs).tables[0].cell("bc", "16")
    assert (cell.mean, cell.n) == (0.5, 1)


def test_mixed_reports_and_normalisers_are_listed():
    other = {"name": "return", "low": -1.0, "high": 10.0}
    recs = [
        record("e", "bc", "16", 0.5, report="final"),
        record("e", "bc", "16", 0.7, 1, report="max", normaliser=other),
    ]
    t = build_table(recs).tables[0]
    assert t.report == "final/max"
    assert t.normalisers == [NORM, other]
    md = to_markdown(build_table(recs))
    assert "Normalised score: return, (R − -1) / (10 − -1)" in md


# --- suites, sample efficiency and LaTeX -----------------------------------------------------


def test_environments_of_one_family_and_options_form_a_suite(table):
    from ssilbench.leaderboard.table import suite_of

    assert suite_of("maze:10x10 (state=image)") == ("maze:all (state=image)", "10x10")
    [suite] = table.suites
    assert suite.suite == "maze:all" and suite.tasks == ["10x10", "20x20"]
    # Only bc at N_L=16 exists on both tasks: runs 0.2, 0.4, 0.6 and 0.1 pooled, one cut
    # from each end, IQM = mean(0.2, 0.4).
    assert list(suite.iqm) == ["bc"] and list(suite.iqm["bc"]) == ["16"]
    assert suite.iqm["bc"]["16"].value == pytest.approx(0.3)
    assert suite.optimality_gap["bc"]["16"].value == pytest.approx((0.8 + 0.6 + 0.4 + 0.9) / 4)
    assert suite.runs["bc"]["16"] == 4
    md = to_markdown(table)
    assert "## maze:all — 2 tasks (10x10, 20x20)" in md and "0.300 [" in md
    rows = [r for r in csv.DictReader(io.StringIO(to_csv(table))) if r["kind"] == "suite"]
    assert {(r["statistic"], r["env"], r["method"], r["budget"]) for r in rows} == {
        ("iqm", "maze:all", "bc", "16"), ("optimality_gap", "maze:all", "bc", "16")}  # fmt: skip
    assert json.loads(to_json(table))["suites"][0]["iqm"]["bc"]["16"]["value"] == pytest.approx(0.3)


def test_sample_efficiency_is_the_mean_score_on_a_log_budget_scale():
    rows = [
        record("maze:10x10", "bc", b, v, n_labeled=n)
        for b, v, n in (("16", 0.2, 16), ("64", 0.6, 64), ("256", 1.0, 256))
    ]
    t = build_table(rows).tables[0]
    # log-spaced budgets, equal widths: trapezoids (0.2+0.6)/2 and (0.6+1.0)/2 averaged.
    assert t.efficiency["bc"] == pytest.approx(0.6)
    assert "| **0.600** |" in to_markdown(build_table(rows))


def test_latex_export_is_booktabs_escaped_and_bolds_the_best(table):
    from ssilbench.leaderboard.render import to_tex

    tex = render(table, "tex")
    assert tex == to_tex(table)
    assert tex.count(r"\begin{tabular}") == 3  # two environments and the suite
    assert r"\toprule" in tex and r"\midrule" in tex and r"\bottomrule" in tex
    assert r"\textbf{0.600} [0.500, 0.700]" in tex  # vm_idm at 16 on maze:10x10
    assert "percentile-bootstrap interval" in tex
    # Every table has an AUC column, the suite's IQM table too.
    assert tex.count(r" & AUC \\") == 3
    nasty = build_table([record("maze:10x10", "<script>_&%$#{}~^\\", "16", 0.5)])
    body = render(nasty, "tex")
    assert "<script>" not in body
    assert r"\textless{}script\textgreater{}\_\&\%\$\#\{\}" in body


def test_probability_of_improvement_per_suite_and_budget():
    # Two tasks at N_L=16. 10x10: of the 9 run pairs vm_idm wins 7, ties one (0.6 = 0.6) and
    # loses one (0.5 < 0.6): 7.5 / 9. 20x20: its one run beats bc's: 1.
    rows = [record(env, m, "16", v, seed)
            for env, m, vals in (("maze:10x10", "vm_idm", [0.5, 0.6, 0.7]),
                                 ("maze:10x10", "bc", [0.2, 0.6, 0.4]),
                                 ("maze:20x20", "vm_idm", [0.9]), ("maze:20x20", "bc", [0.1]))
            for seed, v in enumerate(vals)]  # fmt: skip
    table = build_table(rows, compare=("vm_idm", "bc"))
    [c] = table.comparisons
    assert c.scope == "maze:all" and c.tasks == ["10x10", "20x20"]
    assert c.improvement["16"].value == pytest.approx((7.5 / 9 + 1) / 2)
    md = to_markdown(table)
    assert "## P(vm_idm > bc) — maze:all" in md and "| N_L=16 | 0.917 |" in md
    assert json.loads(to_json(table))["comparisons"][0]["method"] == "vm_idm"
    [row] = [r for r in csv.DictReader(io.StringIO(to_csv(table))) if r["kind"] == "comparison"]
    assert row["method"] == "vm_idm > bc" and float(row["mean"]) == pytest.approx(0.9167, abs=1e-4)
    assert "P(vm_idm &gt; bc) — maze:all" in render(table, "html")


def test_compare_flag_errors(cli):
    out = cli.run("--method", "bc", "--env", "maze:10x10", "--budgets", "16", "--steps", "30",
                  "-q")  # fmt: skip
    assert out.returncode == 0, out.stderr
    bad = cli("leaderboard", "--results", str(cli.results), "--compare", "bc", "vm_idm")
    assert bad.returncode == 2 and "'vm_idm' is not a method label" in bad.stderr
    same = cli("leaderboard", "--results", str(cli.results), "--compare", "bc", "bc")
    assert same.returncode == 2 and "two different methods" in same.stderr


def test_figure_legend_names_methods_of_every_panel(tmp_path):
    # A method drawn only in a later panel must be in the legend, in its own colour.
    pytest.importorskip("matplotlib")
    from ssilbench.studies.figures import Panel, Series, draw

    def panel(title, *names):
        p = Panel(title)
        for n in names:
            s = p.series.setdefault(n, Series(n))
            s.points["0.5"] += [0.4, 0.6]
            s.points["1.0"] += [0.8]
        return p

    [_, svg] = draw([panel("positions", "BC (LC)"), panel("images", "BC (1L CNN)")], "t",
                    "test_accuracy", "train split", tmp_path / "f")  # fmt: skip
    text = svg.read_text()
    assert "BC (LC)" in text and "BC (1L CNN)" in text
    strokes = set(re.findall(r"stroke: (#[0-9a-f]{6})", text))
    assert {"#1f77b4", "#ff7f0e"} <= strokes  # two methods, two colours
