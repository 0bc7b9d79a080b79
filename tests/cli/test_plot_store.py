"""``ssilbench plot`` without ``--sweep``: the leaderboard's runs drawn as the metric vs N_L,
one panel per environment, one line per method; and each wrong combination of options."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ssilbench.runs.records import RunOutcome
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import ResultsStore
from ssilbench.testing import cli_exit_code

pytest.importorskip("matplotlib")

NORM = {"name": "maze", "low": 0.0, "high": 1.0, "source": ""}
# env -> method -> budget -> one score per seed; 'all' is 400 labeled transitions
SCORES = {
    "maze:10x10": {"bc": {"16": [0.2, 0.4], "64": [0.5, 0.7], "all": [0.8, 0.9]},
                   "idm_labeling": {"16": [0.6, 0.8], "64": [0.9, 1.0]}},
    "maze:20x20": {"bc": {"16": [0.1, 0.3]}},
}  # fmt: skip


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("store") / "results"
    with ResultsStore(directory) as store:
        for env, methods in SCORES.items():
            for method, budgets in methods.items():
                for budget, scores in budgets.items():
                    for seed, score in enumerate(scores):
                        spec = RunSpec(method=method, config={}, env=env, options={}, seed=seed,
                                       budget=budget, steps=100, eval_every=50)  # fmt: skip
                        store.start(spec, method, env, "cpu", {})
                        store.finish(spec.run_id, RunOutcome(
                            n_labeled=400 if budget == "all" else int(budget), score=score,
                            final_score=score, max_score=score, report="final",
                            normaliser=NORM, timeline=[], metrics={"test_accuracy": score},
                            stages={},
                        ), wall_time=1.0)  # fmt: skip
    return directory


def test_plot_without_a_sweep_draws_a_panel_per_environment_and_a_line_per_method(
    results, tmp_path, capsys, monkeypatch
):
    import ssilbench.studies.figures as figures

    drawn = []
    keep = figures.save

    def save(fig, out):  # what was drawn, read before the figure is written and closed
        drawn.extend([(ax.get_title(), [(line.get_label(), list(line.get_xdata()))
                                        for line in ax.get_lines()])
                      for ax in fig.axes if ax.get_visible()])  # fmt: skip
        return keep(fig, out)

    monkeypatch.setattr(figures, "save", save)
    out = tmp_path / "figures"
    assert cli_exit_code("plot", "--results", str(results), "--out", str(out)) == 0
    assert "wrote" in capsys.readouterr().err
    for suffix in (".png", ".svg"):
        assert (out / f"leaderboard-score{suffix}").stat().st_size > 5_000
    assert drawn == [
        ("maze:10x10", [("bc", [16.0, 64.0, 400.0]), ("idm_labeling", [16.0, 64.0])]),
        ("maze:20x20", [("bc", [16.0])]),
    ]  # N_L on x: 'all' at its 400 labeled transitions


def test_plot_takes_the_leaderboards_metric(results, tmp_path, capsys):
    out = tmp_path / "figures"
    args = ["plot", "--results", str(results), "--out", str(out), "--latest"]
    assert cli_exit_code(*args, "--metric", "test_accuracy") == 0
    assert (out / "leaderboard-test_accuracy.png").stat().st_size > 5_000
    assert cli_exit_code(*args, "--metric", "return") == 2
    assert "No run recorded the metric 'return'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--quick"], "--quick chooses the [quick] variants of sweep files"),
     (["--sweep", "study.toml", "--metric", "score"], "--metric and --latest apply without"),
     (["--sweep", "study.toml", "--latest"], "--metric and --latest apply without")],
)  # fmt: skip
def test_options_of_the_other_mode_are_refused(results, tmp_path, capsys, args, message):
    out = tmp_path / "figures"
    assert cli_exit_code("plot", "--results", str(results), "--out", str(out), *args) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_a_store_without_finished_runs_says_what_to_do(tmp_path, capsys):
    empty = tmp_path / "results"
    ResultsStore(empty).close()
    assert cli_exit_code("plot", "--results", str(empty), "--out", str(tmp_path / "f")) == 2
    assert "No finished runs with a number of labeled transitions" in capsys.readouterr().err
    assert cli_exit_code("plot", "--results", str(tmp_path / "none")) == 2
    assert "No results store at" in capsys.readouterr().err


def test_without_matplotlib_plot_names_the_extra(results, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    out = tmp_path / "figures"
    assert cli_exit_code("plot", "--results", str(results), "--out", str(out)) == 2
    assert 'Figures need matplotlib: pip install "ssilbench[plot]"' in capsys.readouterr().err
    assert not out.exists()
