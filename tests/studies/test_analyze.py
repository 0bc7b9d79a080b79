"""Tests of the Procgen complexity and stochasticity analysis (``ssilbench analyze``): the
numbers against hand computations, the files it writes, and each bad input through the CLI.

The store is filled with the store's own API; no Procgen environment is ever run (the
complexity classes come from the procgen plugin's EnvSpec metadata, which needs no game)."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import replace
from pathlib import Path

import pytest

from ssilbench.errors import UsageError
from ssilbench.leaderboard.stats import t975
from ssilbench.plugins import load_plugins
from ssilbench.runs.records import RunOutcome
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import ResultsStore
from ssilbench.studies.analysis import (
    analyze,
    groups_of,
    metadata_from_registry,
    pearson,
    resolve_label,
    t_test_p,
)
from ssilbench.studies.analysis_report import games_csv, to_markdown

IDM, BC = "idm_labeling", "bc"

# game -> method -> budget -> per-seed (score, policy_entropy, idm_entropy); None: not recorded
RUNS: dict[str, dict[str, dict[str, list[tuple]]]] = {
    "bigfish": {
        IDM: {
            "16": [(0.5, 5.0, 1.0), (0.7, 5.0, 1.0)],
            "64": [(0.8, 5.0, 0.2), (0.9, 5.0, 0.4)],
            "all": [(1.0, 5.0, 0.1)],  # no BC at this budget: left out of gap and entropies
        },
        BC: {
            "16": [(0.1, 2.0, None), (0.3, 2.0, None)],
            "64": [(0.4, 1.2, None), (0.6, 1.4, None)],
        },
    },
    "maze": {
        IDM: {"16": [(0.4, 5.0, 0.3), (0.4, 5.0, 0.3)], "64": [(0.6, 5.0, 0.3), (0.8, 5.0, 0.3)]},
        BC: {"16": [(0.2, 0.9, None), (0.2, 0.9, None)], "64": [(0.5, 0.9, None)] * 2},
    },
    "starpilot": {
        IDM: {"16": [(0.3, 5.0, 0.2), (0.5, 5.0, 0.2)], "64": [(0.5, 5.0, 0.2)] * 2},
        BC: {"16": [(0.0, 1.0, None), (0.2, 1.0, None)], "64": [(0.3, 1.0, None)] * 2},
    },
    "coinrun": {
        IDM: {"16": [(0.2, 5.0, 0.3)] * 2, "64": [(0.5, 5.0, 0.3)] * 2},
        BC: {"16": [(0.2, 0.5, None)] * 2, "64": [(0.4, 0.5, None)] * 2},
    },
    "ninja": {
        IDM: {"16": [(0.1, 5.0, 0.3), (0.3, 5.0, 0.3)], "64": [(0.3, 5.0, 0.3)] * 2},
        BC: {"16": [(0.2, 0.4, None)] * 2, "64": [(0.3, 0.4, None), (0.5, 0.4, None)]},
    },
    "leaper": {  # no entropies recorded
        IDM: {"16": [(0.3, None, None)] * 2, "64": [(0.4, None, None)] * 2},
        BC: {"16": [(0.1, None, None)] * 2, "64": [(0.2, None, None)] * 2},
    },
    "chaser": {BC: {"16": [(0.3, 1.0, None)] * 2, "64": [(0.5, 1.0, None)] * 2}},  # BC only
}
GAPS = {"bigfish": 0.375, "maze": 0.2, "starpilot": 0.25, "coinrun": 0.05, "ninja": -0.05,
        "leaper": 0.2}  # fmt: skip
ENTROPY_GAPS = {"bigfish": 1.3 - 0.3, "maze": 0.6, "starpilot": 0.8, "coinrun": 0.2,
                "ninja": 0.1}  # fmt: skip
SIMPLE, COMPLEX = ("bigfish", "maze", "starpilot"), ("coinrun", "ninja", "leaper")
NORM = {"name": "lapo", "low": 0.0, "high": 1.0, "source": ""}


def fill(directory: Path, runs=RUNS) -> None:
    with ResultsStore(directory) as store:
        for game, methods in runs.items():
            for method, budgets in methods.items():
                for budget, seeds in budgets.items():
                    for seed, (score, pol, idm) in enumerate(seeds):
                        spec = RunSpec(method=method, config={}, env=f"procgen:{game}",
                                       options={}, budget=budget, seed=seed, steps=100,
                                       eval_every=50)  # fmt: skip
                        metrics = {"test_accuracy": 0.5, "policy_entropy": pol,
                                   "idm_entropy": idm}  # fmt: skip
                        store.start(spec, method, f"procgen:{game}", "cpu", {})
                        store.finish(spec.run_id, RunOutcome(
                            n_labeled=16, score=score, final_score=score, max_score=score,
                            report="max", normaliser=NORM, timeline=[],
                            metrics={k: v for k, v in metrics.items() if v is not None},
                            stages={},
                        ), wall_time=1.0)  # fmt: skip


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("store") / "results"
    fill(directory)
    return directory


@pytest.fixture(scope="module")
def records(results):
    with ResultsStore(results, create=False) as store:
        return store.rows("done")


@pytest.fixture(scope="module")
def result(records):
    groups = {f"procgen:{g}": "simple" for g in SIMPLE}
    groups |= {f"procgen:{g}": "complex" for g in (*COMPLEX, "chaser")}
    expected = [f"procgen:{g}" for g in (*RUNS, "heist")]
    return analyze(records, IDM, BC, groups, "complexity", expected)


def game(result, name):
    (found,) = [g for g in result.games if g.env == f"procgen:{name}"]
    return found


# --- the numbers -------------------------------------------------------------------------


def test_return_gaps_by_hand(result):
    for name, gap in GAPS.items():
        assert game(result, name).gap == pytest.approx(gap, abs=1e-12), name
    assert game(result, "bigfish").budgets == ["16", "64"]
    assert game(result, "bigfish").method_runs == 5 and game(result, "bigfish").baseline_runs == 4


def test_group_means_and_t_intervals_by_hand(result):
    means = {m.group: m for m in result.groups}
    assert sorted(means) == ["complex", "simple"]
    for group, names in (("simple", SIMPLE), ("complex", COMPLEX)):
        gaps = [GAPS[n] for n in names]
        mean = sum(gaps) / 3
        sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / 2)
        assert means[group].mean == pytest.approx(mean)
        assert means[group].ci95 == pytest.approx(4.303 * sd / math.sqrt(3))
        assert sorted(means[group].games) == sorted(f"procgen:{n}" for n in names)
    assert means["simple"].mean == pytest.approx(0.275)
    assert means["complex"].mean == pytest.approx(0.2 / 3)


def test_entropy_gaps_use_the_largest_shared_budget(result):
    bigfish = game(result, "bigfish")
    # N_L=all has an IDM entropy but no BC run: 64 is the largest budget with both.
    assert bigfish.entropy_budget == "64"
    assert bigfish.policy_entropy == pytest.approx(1.3)  # BC's policy, not the IDM policy's 5.0
    assert bigfish.idm_entropy == pytest.approx(0.3)
    for name, gap in ENTROPY_GAPS.items():
        assert game(result, name).entropy_gap == pytest.approx(gap), name


def test_chosen_entropy_budget(records):
    groups = {r.env_label: "simple" for r in records}
    chosen = analyze(records, IDM, BC, groups, entropy_budget="16")
    assert game(chosen, "bigfish").entropy_gap == pytest.approx(2.0 - 1.0)
    assert game(chosen, "bigfish").entropy_budget == "16"
    missing = analyze(records, IDM, BC, groups, entropy_budget="all")
    assert game(missing, "bigfish").entropy_gap is None
    assert "no entropies of both methods at N_L=all" in game(missing, "bigfish").notes


def test_pearson_by_hand(result):
    xs = [ENTROPY_GAPS[n] for n in ENTROPY_GAPS]
    ys = [GAPS[n] for n in ENTROPY_GAPS]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    r = sxy / math.sqrt(sxx * syy)
    # Student's t with 3 degrees of freedom: P(|T| <= t) = (2/pi)(theta + sin cos theta).
    t = r * math.sqrt(3 / (1 - r * r))
    theta = math.atan(t / math.sqrt(3))
    p = 1 - 2 / math.pi * (theta + math.sin(theta) * math.cos(theta))
    c = result.correlation
    assert c.n == 5
    assert c.r == pytest.approx(r, abs=1e-12)
    assert c.p_value == pytest.approx(p, rel=1e-9)
    assert r > 0.9 and p < 0.05
    assert c.low <= c.r <= c.high <= 1.0


def test_bootstrap_interval_of_a_gap(result):
    # maze: only the IDM's N_L=64 cell varies (0.6, 0.8), so resampled gaps are
    # 0.15, 0.2 or 0.25 with probabilities 1/4, 1/2, 1/4.
    interval = game(result, "maze").interval
    assert interval.value == pytest.approx(0.2)
    assert interval.low == pytest.approx(0.15) and interval.high == pytest.approx(0.25)


@pytest.mark.parametrize("df", range(1, 31))
def test_t_test_p_at_the_tabulated_quantiles(df):
    # t975 holds t_{0.975, df} to three decimals: the two-sided p there is 0.05.
    assert t_test_p(t975(df), df) == pytest.approx(0.05, abs=2e-4)


def test_t_test_p_closed_forms():
    assert t_test_p(0.0, 7) == pytest.approx(1.0)
    assert t_test_p(1.0, 1) == pytest.approx(0.5)  # Cauchy: P(|T| > 1) = 1/2
    for t in (0.3, 1.7, 4.0):  # two degrees of freedom: P(|T| > t) = 1 - t / sqrt(2 + t^2)
        assert t_test_p(t, 2) == pytest.approx(1 - t / math.sqrt(2 + t * t))
        assert t_test_p(-t, 2) == t_test_p(t, 2)


def test_pearson_needs_three_pairs_with_spread():
    assert pearson([1.0, 2.0], [1.0, 3.0]) is None
    assert pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) is None
    perfect = pearson([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0])
    assert perfect.r == pytest.approx(1.0) and perfect.p_value == 0.0


def test_missing_runs_and_metrics_are_said(result):
    chaser = game(result, "chaser")
    assert chaser.gap is None and "no runs of idm_labeling" in chaser.notes
    leaper = game(result, "leaper")
    assert leaper.gap == pytest.approx(0.2) and leaper.entropy_gap is None
    assert "no policy_entropy in the runs of bc" in leaper.notes
    assert "no idm_entropy in the runs of idm_labeling" in leaper.notes
    assert (
        "N_L=all run with idm_labeling only (left out of the gap)" in game(result, "bigfish").notes
    )
    assert any("heist" in note and "no runs" in note for note in result.notes)
    text = to_markdown(result)
    for needle in ("no runs of idm_labeling", "no idm_entropy", "procgen:heist",
                   "Pearson r", "| simple | 3 | 0.275 |"):  # fmt: skip
        assert needle in text, needle
    rows = list(csv.DictReader(io.StringIO(games_csv(result))))
    assert {r["env"] for r in rows} == {f"procgen:{g}" for g in RUNS}
    (chaser_row,) = [r for r in rows if r["env"] == "procgen:chaser"]
    assert chaser_row["return_gap"] == "" and "no runs" in chaser_row["notes"]


def test_classes_come_from_the_procgen_metadata(records):
    groups = groups_of(records, metadata_from_registry(load_plugins()), "complexity")
    assert {env: g for env, g in groups.items()} == {
        **{f"procgen:{g}": "simple" for g in SIMPLE},
        **{f"procgen:{g}": "complex" for g in (*COMPLEX, "chaser")},
    }


def test_resolve_label(records):
    assert resolve_label(records, "bc", "--baseline", "procgen:all") == "bc"
    variants = [replace(r, method_label="bc (lr=0.1)") for r in records if r.method == "bc"]
    assert resolve_label(variants, "bc", "--baseline", "procgen:all") == "bc (lr=0.1)"
    # An exact label wins; a bare name standing for several variants must be chosen.
    assert resolve_label([*records, *variants], "bc", "--baseline", "procgen:all") == "bc"
    others = [replace(r, method_label="bc (lr=0.2)") for r in variants]
    with pytest.raises(UsageError, match="several variants of 'bc'"):
        resolve_label([*variants, *others], "bc", "--baseline", "procgen:all")


# --- the command -------------------------------------------------------------------------


def test_analyze_writes_figures_and_tables(cli, results):
    out = Path(results) / "analysis"  # the default: beside the store, not the current folder
    done = cli("analyze", "--env", "procgen:all", "--results", str(results))
    assert done.returncode == 0, done.stderr
    assert not (cli.tmp / "analysis").exists()
    assert "# Analysis: idm_labeling over bc, by complexity" in done.stdout
    assert "no runs of idm_labeling" in done.stdout and "procgen:heist" in done.stdout
    stem = "procgen-idm_labeling-vs-bc"
    for name in ("complexity.png", "complexity.svg", "entropy.png", "entropy.svg",
                 "games.csv", "complexity.csv", "correlation.csv", "report.md"):  # fmt: skip
        path = out / f"{stem}-{name}"
        assert path.is_file() and path.stat().st_size > 0, name
    assert (out / f"{stem}-complexity.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in (out / f"{stem}-entropy.svg").read_bytes()[:500]
    groups = list(csv.DictReader((out / f"{stem}-complexity.csv").open()))
    assert {g["complexity"]: float(g["mean_return_gap"]) for g in groups} == pytest.approx(
        {"simple": 0.275, "complex": 0.2 / 3}
    )
    (corr,) = csv.DictReader((out / f"{stem}-correlation.csv").open())
    assert int(corr["n"]) == 5 and float(corr["pearson_r"]) > 0.9


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--env", "procgn:all"], "Unknown environment 'procgn'. Did you mean 'procgen'?"),
        (["--env", "procgen:coinrn"], "Did you mean 'coinrun'?"),
        (["--env", "procgen:heist"], "No finished runs of procgen:heist"),
        (["--env", "procgen:all", "--method", "lapo"], "no finished runs of 'lapo'"),
        (["--env", "procgen:all", "--method", "idm_labelling"], "Did you mean 'idm_labeling'?"),
        (["--env", "procgen:all", "--baseline", "idm_labeling"], "compare two methods"),
        (["--env", "procgen:all", "--by", "complexty"], "Did you mean 'complexity'?"),
        (["--env", "procgen:all", "--out", "blocker"], "Cannot write to --out blocker"),
        (["--env", "procgen:all", "--out", "blocker/sub"], "Cannot write to --out blocker"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(cli, results, args, message):
    (cli.tmp / "blocker").write_text("a file where a folder should be")
    done = cli("analyze", "--results", str(results), *args)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("error:") == 1


def test_analyze_without_a_store(cli):
    done = cli("analyze", "--env", "procgen:all", "--results", str(cli.tmp / "none"))
    assert done.returncode == 2 and "No results store" in done.stderr


def test_figures_without_any_gap(tmp_path):
    # The methods share no budget: no bar, no class, no correlation — still two figures.
    from ssilbench.studies.analysis_figures import complexity_figure, stochasticity_figure

    fill(tmp_path / "results", {"bigfish": {IDM: {"16": [(0.5, 1.0, 0.2)]},
                                            BC: {"64": [(0.1, 1.0, None)]}}})  # fmt: skip
    with ResultsStore(tmp_path / "results", create=False) as store:
        rows = store.rows("done")
    empty = analyze(rows, IDM, BC, {"procgen:bigfish": "simple"})
    assert game(empty, "bigfish").gap is None and empty.groups == [] and not empty.correlation
    assert "idm_labeling and bc share no label budget" in game(empty, "bigfish").notes
    written = [
        *complexity_figure(empty, tmp_path / "c"),
        *stochasticity_figure(empty, tmp_path / "e"),
    ]
    assert [p.name for p in written] == ["c.png", "c.svg", "e.png", "e.svg"]
