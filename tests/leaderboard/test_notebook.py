"""The results store in Python (ssilbench.leaderboard.notebook): typed records, the
selection of ``ssilbench curves``, the leaderboard's table and checks, DataFrames."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ssilbench.errors import SsilbenchError, UsageError
from ssilbench.leaderboard.board import store_table
from ssilbench.leaderboard.notebook import CELL_COLUMNS, RUN_COLUMNS, open_results
from ssilbench.runs.records import RunOutcome, RunRecord
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import ResultsStore

NORM = {"name": "maze", "low": 0.0, "high": 1.0, "source": ""}
# env -> method -> budget -> one score per seed
SCORES = {
    "maze:10x10": {"bc": {"16": [0.2, 0.4], "64": [0.5, 0.7]},
                   "idm_labeling": {"16": [0.6, 0.8], "64": [0.9, 1.0]}},
    "maze:20x20": {"bc": {"16": [0.1, 0.3]}},
}  # fmt: skip


def spec(env: str, method: str, budget: str, seed: int) -> RunSpec:
    return RunSpec(method=method, config={}, env=env, options={}, budget=budget, seed=seed,
                   steps=100, eval_every=50)  # fmt: skip


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("store") / "results"
    with ResultsStore(directory) as store:
        for env, methods in SCORES.items():
            for method, budgets in methods.items():
                for budget, scores in budgets.items():
                    for seed, score in enumerate(scores):
                        s = spec(env, method, budget, seed)
                        store.start(s, method, env, "cpu", {})
                        store.finish(s.run_id, RunOutcome(
                            n_labeled=int(budget), score=score, final_score=score,
                            max_score=score, report="final", normaliser=NORM, timeline=[],
                            metrics={"test_accuracy": score / 2}, stages={},
                        ), wall_time=1.0)  # fmt: skip
        failed = spec("maze:10x10", "bc", "256", 0)
        store.start(failed, "bc", "maze:10x10", "cpu", {})
        store.fail(failed.run_id, "RuntimeError: out of memory", 2.0)
    return directory


def test_every_run_is_a_typed_record_and_the_selection_is_the_curves_commands(results):
    runs = open_results(results)
    assert len(runs) == 11 and all(isinstance(r, RunRecord) for r in runs)
    assert {r.status for r in runs} == {"done", "failed"}
    done = runs.select(status="done")
    assert len(done) == 10
    bc = done.select(method="bc", env="maze:10x10", budget=16)
    assert sorted((r.seed, r.score) for r in bc) == [(0, 0.2), (1, 0.4)]
    one = runs.select(run=bc.records[0].run_id[:8])
    assert [r.run_id for r in one] == [bc.records[0].run_id]
    assert len(runs.select(status="failed", seed=0)) == 1
    with pytest.raises(UsageError, match="at least 6 characters"):
        runs.select(run="abc")


def test_the_leaderboard_is_the_commands_table_of_the_selections_finished_runs(results):
    runs = open_results(results)
    assert runs.leaderboard().to_dict() == store_table(str(results)).to_dict()
    table = runs.select(env="maze:10x10").leaderboard(compare=("idm_labeling", "bc"))
    assert [t.env for t in table.tables] == ["maze:10x10"]
    assert table.env_table("maze:10x10").cell("idm_labeling", "64").mean == pytest.approx(0.95)
    assert table.comparisons  # compare reaches the same computation as --compare
    with pytest.raises(UsageError, match="'lapo' is not a method label of the store"):
        runs.leaderboard(compare=("lapo", "bc"))
    with pytest.raises(UsageError, match="No run recorded the metric 'return'"):
        runs.leaderboard(metric="return")


def test_without_pandas_a_dataframe_names_the_extra_and_the_records_still_read(
    results, monkeypatch
):
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas raises ImportError
    runs = open_results(results)
    with pytest.raises(UsageError, match=r'pip install "ssilbench\[notebook\]"'):
        runs.to_dataframe()
    with pytest.raises(UsageError, match="notebook"):
        runs.leaderboard_frame()
    assert len(runs.select(status="done")) == 10


def test_dataframes_of_runs_and_of_the_leaderboards_cells(results):
    pytest.importorskip("pandas")
    frame = open_results(results).to_dataframe()
    assert list(frame.columns) == [*RUN_COLUMNS, "test_accuracy"]
    assert len(frame) == 11 and set(frame["status"]) == {"done", "failed"}
    bc16 = frame[(frame.method == "bc") & (frame.env == "maze:10x10") & (frame.budget == "16")]
    assert sorted(bc16["score"]) == [0.2, 0.4]
    assert sorted(bc16["test_accuracy"]) == [0.1, 0.2]
    cells = open_results(results).leaderboard_frame()
    assert list(cells.columns) == list(CELL_COLUMNS)
    assert len(cells) == 5  # 4 cells of maze:10x10, 1 of maze:20x20
    row = cells[(cells.method == "idm_labeling") & (cells.budget == "64")].iloc[0]
    assert row["mean"] == pytest.approx(0.95) and row["n"] == 2 and bool(row["best"])
    assert row["seeds"] == [0, 1] and row["values"] == [0.9, 1.0]


def test_a_folder_without_a_store_is_one_clear_error(tmp_path):
    with pytest.raises(SsilbenchError, match="No results store at .*nowhere"):
        open_results(tmp_path / "nowhere")
    assert not (tmp_path / "nowhere").exists()  # reading never writes


def test_without_a_path_the_commands_default_store_is_read(results, monkeypatch):
    monkeypatch.setenv("SSILBENCH_RESULTS", str(results))
    assert len(open_results()) == 11
