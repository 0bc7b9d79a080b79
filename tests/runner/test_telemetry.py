"""Curves and progress events of a run (ssilbench.runner.telemetry), their table in the
results store (format 2, and format-1 stores passing through), and exports carrying them."""

from __future__ import annotations

import gzip
import json
import sqlite3
from pathlib import Path

import pytest
import torch

from ssilbench.errors import UsageError
from ssilbench.runner.telemetry import MAX_POINTS, RunTelemetry, Series, thin
from ssilbench.runs.exchange import export_results, merge_results, read_export
from ssilbench.runs.records import RunOutcome, RunRecord
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import ResultsStore
from ssilbench.runs.store_file import SCHEMA_VERSION
from ssilbench.testing import cli_exit_code


def test_thin_keeps_first_last_and_bounds_the_size():
    steps = list(range(1, 10_001))
    kept, values = thin(steps, [s * 2 for s in steps], 1000)
    assert len(kept) == 1000 and kept[0] == 1 and kept[-1] == 10_000
    assert kept == sorted(set(kept)) and values == [s * 2 for s in kept]
    assert thin(steps, steps, 1000) == (kept, kept)  # the same points every time
    assert thin([1, 2, 3], [1, 2, 3], 1000) == ([1, 2, 3], [1, 2, 3])


@pytest.mark.parametrize("n", [1, 7, 2000, 2001, 50_000])
def test_series_is_bounded_while_it_grows(n):
    series = Series(limit=100)
    for step in range(1, n + 1):
        series.add(step, float(step))
        assert len(series.steps) <= 201
    steps, values = series.points()
    assert len(steps) <= 100
    assert steps[0] == 1 and steps[-1] == n and values == [float(s) for s in steps]


def _spec(seed: int = 0) -> RunSpec:
    return RunSpec(method="bc", config={}, env="maze:10x10", options={}, budget="16",
                   seed=seed, steps=100, eval_every=100)  # fmt: skip


def test_telemetry_curves_and_throttled_events():
    events = []
    t = RunTelemetry("r1", 3000, events.append, every=3600)
    for step in range(1, 3001):
        stage = "idm" if step <= 1000 else "policy"
        t.train_loss(stage, step, torch.tensor(1.0 / step))
    t.evaluation("policy", 3000, {"step": 3000, "score": 0.5, "return": None})
    t.metric("policy", "kept", 3000, 0.25)
    # One event per stage change (the clock never allowed another) and the evaluation.
    assert [(e["kind"], e.get("stage")) for e in events] == [
        ("progress", "idm"), ("progress", "policy"), ("eval", "policy")]  # fmt: skip
    assert events[1]["step"] == 1001 and events[1]["total"] == 3000
    assert events[1]["loss"] == pytest.approx(1 / 1001)
    curves = {(c["stage"], c["name"]): c for c in t.curves()}
    assert set(curves) == {("idm", "loss"), ("policy", "loss"), ("policy", "eval/score"),
                           ("policy", "eval/return"), ("policy", "kept")}  # fmt: skip
    loss = curves[("policy", "loss")]
    assert loss["steps"][0] == 1001 and loss["steps"][-1] == 3000
    assert len(loss["steps"]) <= MAX_POINTS
    assert loss["values"][-1] == pytest.approx(1 / 3000)
    assert curves[("policy", "eval/return")]["values"] == [None]


def test_steps_forgone_shrink_the_total_and_are_said_at_once():
    events = []
    t = RunTelemetry("r1", 200, events.append, every=3600)
    t.forgo(50)  # before any stage: the next event carries it
    assert t.total == 150 and events == []
    t.train_loss("idm", 10, torch.tensor(0.5))
    t.forgo(40)  # the IDM stopped at step 10 of its 50
    assert [(e["kind"], e["step"], e["total"]) for e in events] == [
        ("progress", 10, 150), ("progress", 10, 110)]  # fmt: skip
    t.forgo(1_000)  # never below the step it stands at
    assert t.total == 10


def test_stacked_losses_are_picked_per_run():
    t = RunTelemetry("r1", 10, None)
    for step in range(1, 11):
        t.train_loss("policy", step, torch.tensor([step, 10.0 * step]), index=1)
    [curve] = t.curves()
    assert curve["values"] == [10.0 * s for s in curve["steps"]]


def _outcome(curves) -> RunOutcome:
    return RunOutcome(n_labeled=16, score=0.5, final_score=0.5, max_score=0.5, report="final",
                      normaliser={}, timeline=[{"step": 100, "score": 0.5}], metrics={},
                      stages={}, curves=curves)  # fmt: skip


CURVES = [{"stage": "policy", "name": "loss", "steps": [1, 50, 100], "values": [2.0, None, 0.5]}]


def _finished(folder: Path, curves=CURVES, seed: int = 0) -> str:
    spec = _spec(seed)
    with ResultsStore(folder) as store:
        store.start(spec, "bc", "maze:10x10", "cpu", {})
        store.finish(spec.run_id, _outcome(curves), 1.0)
    return spec.run_id


def test_the_store_keeps_curves(tmp_path):
    run_id = _finished(tmp_path)
    with ResultsStore.open_read_only(tmp_path) as store:
        assert store.curves() == {run_id: CURVES}
        [record] = store.rows("done", curves=True)
        assert record.curves == CURVES
        assert store.rows("done")[0].curves is None  # not read unless asked
        assert store.run(run_id, curves=True).curves == CURVES
    db = sqlite3.connect(tmp_path / "results.sqlite")
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    db.close()


def test_a_format_1_store_passes_through(tmp_path):
    """A store written before curves (no table, user_version 1) reads as one without curves,
    and gains the table when a sweep opens it for writing; its runs are intact."""
    run_id = _finished(tmp_path)
    db = sqlite3.connect(tmp_path / "results.sqlite")
    db.execute("DROP TABLE curves")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with ResultsStore.open_read_only(tmp_path) as store:
        assert not store.has_curves_table() and store.curves() == {}
        assert store.rows("done", curves=True)[0].curves == []
    with ResultsStore(tmp_path) as store:
        assert store.has_curves_table()
        assert store.statuses() == {run_id: "done"}
    db = sqlite3.connect(tmp_path / "results.sqlite")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    db.close()


def test_exports_carry_curves_and_merges_write_them(tmp_path):
    run_id = _finished(tmp_path / "a")
    out = tmp_path / "runs.jsonl.gz"
    export_results(ResultsStore.open_read_only(tmp_path / "a"), out)
    lines = [json.loads(x) for x in gzip.decompress(out.read_bytes()).decode().splitlines()]
    assert lines[0]["version"] == 2 and lines[1]["curves"] == CURVES
    [run] = read_export(out)
    assert run.curves == CURVES
    with ResultsStore(tmp_path / "b") as store:
        assert merge_results(store, [run], str(out)).added == 1
        assert store.curves() == {run_id: CURVES}

    # The same result held without curves (merged from an older export) gains them.
    plain = RunRecord.from_row({**run.to_row()})
    with ResultsStore(tmp_path / "c") as store:
        store.put_rows([plain])
        assert store.curves() == {}
        assert merge_results(store, [run], str(out)).identical == 1
        assert store.curves() == {run_id: CURVES}


def test_an_export_without_curves_is_format_1(tmp_path):
    _finished(tmp_path / "a", curves=[])
    out = tmp_path / "runs.jsonl"
    export_results(ResultsStore.open_read_only(tmp_path / "a"), out)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert lines[0]["version"] == 1 and "curves" not in lines[1]


def test_an_export_may_leave_the_curves_out(tmp_path):
    _finished(tmp_path / "a")
    out = tmp_path / "runs.jsonl"
    assert cli_exit_code("results", "export", "--results", str(tmp_path / "a"), "--out",
                         str(out), "--no-curves") == 0  # fmt: skip
    header, line = (json.loads(x) for x in out.read_text().splitlines())
    assert header["version"] == 1 and "curves" not in line
    with_curves = tmp_path / "with.jsonl"
    export_results(ResultsStore.open_read_only(tmp_path / "a"), with_curves)
    [run] = read_export(with_curves)
    [plain] = read_export(out)
    assert plain.to_row() == run.to_row() and run.curves == CURVES and not plain.curves


def test_a_bad_curve_is_refused(tmp_path):
    _finished(tmp_path / "a")
    out = tmp_path / "runs.jsonl"
    export_results(ResultsStore.open_read_only(tmp_path / "a"), out)
    header, line = out.read_text().splitlines()
    row = json.loads(line)
    row["curves"][0]["values"] = [1.0]  # three steps, one value
    out.write_text(header + "\n" + json.dumps(row) + "\n")
    with pytest.raises(UsageError, match=r"line 2: .*curves.*3 steps but 1 values"):
        read_export(out)
