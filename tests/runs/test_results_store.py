"""Tests of the SQLite results store: WAL mode, run lifecycle, stale runs, bad paths."""

from __future__ import annotations

import json
import os
import socket

import pytest

from ssilbench.errors import ResultsStoreError
from ssilbench.runs.records import RunOutcome, RunRecord
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import DB_NAME, ResultsStore, ensure_writable

DEAD_PID = 2**31 - 1  # above any kernel's pid_max: no such process
VERSIONS = {"baselines": "0.1.0", "maze": "0.1.0"}


def spec(seed: int = 0, method: str = "bc", budget: str = "16") -> RunSpec:
    return RunSpec(
        method=method,
        config={"arch": None, "lr": None},
        env="maze:10x10",
        options={"state": "position", "episodes": 200},
        budget=budget,
        seed=seed,
        steps=100,
        eval_every=50,
    )


OUTCOME = RunOutcome(
    n_labeled=16,
    score=0.75,
    final_score=0.75,
    max_score=0.8,
    report="final",
    normaliser={"name": "success rate", "low": 0.0, "high": 1.0, "source": ""},
    timeline=[{"step": 50, "score": 0.5}, {"step": 100, "score": 0.75}],
    metrics={"test_accuracy": 0.9},
    stages={"policy": {"declared": 100, "used": 100, "stopped_early": None}},
)


@pytest.fixture
def store(tmp_path):
    with ResultsStore(tmp_path / "results") as s:
        yield s


def start(store: ResultsStore, run: RunSpec) -> None:
    store.start(run, "bc", "maze:10x10", "cpu", VERSIONS)


def row(store: ResultsStore, run_id: str) -> RunRecord:
    (record,) = [r for r in store.rows(status=None) if r.run_id == run_id]
    return record


def test_journal_mode_is_wal(store):
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.path == store.directory / DB_NAME
    assert store.path.is_file()


def test_start_finish_rows_round_trip(store):
    run = spec()
    start(store, run)
    assert store.status(run.run_id) == "running"
    assert store.rows() == []  # only done runs by default
    store.finish(run.run_id, OUTCOME, wall_time=12.5)
    assert store.status(run.run_id) == "done"
    (record,) = store.rows()
    assert record.run_id == run.run_id
    assert record.spec == run and record.spec_doc == run.document()
    assert record.method == "bc" and record.method_label == "bc"
    assert record.env == "maze:10x10" and record.env_label == "maze:10x10"
    assert record.budget == "16" and record.seed == 0
    assert record.attempts == 1
    assert record.wall_time == 12.5
    assert record.n_labeled == 16
    assert record.score == 0.75
    assert record.final_score == 0.75
    assert record.max_score == 0.8
    assert record.report == "final"
    assert record.normaliser == OUTCOME.normaliser
    assert record.timeline == OUTCOME.timeline
    assert record.metrics == OUTCOME.metrics
    assert record.stages == OUTCOME.stages
    assert record.versions == VERSIONS
    assert record.device == "cpu"
    assert record.host == socket.gethostname()
    assert record.pid == os.getpid()
    assert record.error is None
    assert record.started_at <= record.finished_at


def test_statuses(store):
    a, b = spec(seed=0), spec(seed=1)
    start(store, a)
    start(store, b)
    store.finish(a.run_id, OUTCOME, 1.0)
    assert store.statuses() == {a.run_id: "done", b.run_id: "running"}
    assert store.status("no-such-run") is None


def test_a_done_run_is_never_overwritten(store):
    run = spec()
    start(store, run)
    store.finish(run.run_id, OUTCOME, wall_time=1.0)
    store.start(run, "other label", "other env", "cuda:0", {"x": "1"})
    record = row(store, run.run_id)
    assert record.status == "done"
    assert record.attempts == 1
    assert record.device == "cpu"
    assert record.score == 0.75
    assert record.versions == VERSIONS


def test_fail_records_the_traceback(store):
    run = spec()
    start(store, run)
    text = 'Traceback (most recent call last):\n  File "x.py", line 1\nRuntimeError: CUDA OOM\n'
    store.fail(run.run_id, text, wall_time=3.0)
    record = row(store, run.run_id)
    assert record.status == "failed"
    assert record.error == text
    assert record.wall_time == 3.0
    assert store.rows() == []
    assert [r.run_id for r in store.rows(status="failed")] == [run.run_id]


def test_restart_after_fail_increments_attempts(store):
    run = spec()
    start(store, run)
    store.fail(run.run_id, "boom", wall_time=1.0)
    start(store, run)
    record = row(store, run.run_id)
    assert record.status == "running"
    assert record.attempts == 2
    assert record.error is None
    assert record.wall_time is None and record.finished_at is None
    store.finish(run.run_id, OUTCOME, wall_time=2.0)
    assert row(store, run.run_id).status == "done"
    assert row(store, run.run_id).attempts == 2


def _set(store: ResultsStore, run_id: str, column: str, value) -> None:
    store.db.execute(f"UPDATE runs SET {column} = ? WHERE run_id = ?", (value, run_id))


def test_mark_stale_interrupted_uses_the_pid(store):
    dead, alive = spec(seed=0), spec(seed=1)
    start(store, dead)
    start(store, alive)
    _set(store, dead.run_id, "pid", DEAD_PID)
    assert row(store, alive.run_id).pid == os.getpid()
    assert store.mark_stale_interrupted() == 1
    assert store.status(dead.run_id) == "interrupted"
    assert store.status(alive.run_id) == "running"
    # an interrupted run can be started again
    start(store, dead)
    assert row(store, dead.run_id).status == "running"
    assert row(store, dead.run_id).attempts == 2


def test_mark_stale_interrupted_ignores_finished_runs(store):
    done, failed = spec(seed=0), spec(seed=1)
    for run in (done, failed):
        start(store, run)
        _set(store, run.run_id, "pid", DEAD_PID)
    store.finish(done.run_id, OUTCOME, 1.0)
    store.fail(failed.run_id, "boom", 1.0)
    assert store.mark_stale_interrupted() == 0
    assert store.statuses() == {done.run_id: "done", failed.run_id: "failed"}


def test_mark_stale_interrupted_without_pid(store):
    run = spec()
    start(store, run)
    _set(store, run.run_id, "pid", None)
    assert store.mark_stale_interrupted() == 1
    assert store.status(run.run_id) == "interrupted"


def test_a_second_connection_sees_committed_runs(tmp_path):
    with ResultsStore(tmp_path) as writer, ResultsStore(tmp_path, create=False) as reader:
        run = spec()
        start(writer, run)
        assert reader.status(run.run_id) == "running"
        writer.finish(run.run_id, OUTCOME, 1.0)
        assert [r.run_id for r in reader.rows()] == [run.run_id]


def test_ensure_writable_creates_nested_directories(tmp_path):
    target = tmp_path / "a" / "b" / "results"
    assert ensure_writable(target) == target
    assert target.is_dir()
    assert list(target.iterdir()) == []  # the write probe is removed


def test_ensure_writable_on_a_regular_file(tmp_path):
    path = tmp_path / "results"
    path.write_text("not a directory")
    with pytest.raises(ResultsStoreError, match="not a directory"):
        ensure_writable(path)
    with pytest.raises(ResultsStoreError):
        ensure_writable(path / "sub")
    with pytest.raises(ResultsStoreError):
        ResultsStore(path)


def test_open_without_create_needs_an_existing_store(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ResultsStoreError, match="No results store"):
        ResultsStore(missing, create=False)
    assert not missing.exists()


def test_a_file_that_is_not_sqlite(tmp_path):
    (tmp_path / DB_NAME).write_bytes(b"this is not an SQLite database\n" * 64)
    with pytest.raises(ResultsStoreError, match="Cannot open the results store"):
        ResultsStore(tmp_path)
    with pytest.raises(ResultsStoreError):
        ResultsStore(tmp_path, create=False)


def test_a_store_from_a_newer_ssilbench_is_refused(tmp_path):
    with ResultsStore(tmp_path) as s:
        s.db.execute("PRAGMA user_version = 99")
    with pytest.raises(ResultsStoreError, match="written by a newer ssilbench .*format 99"):
        ResultsStore(tmp_path)


def test_a_full_disk_is_a_clear_error_and_leaves_no_half_written_row(store):
    run = spec()
    start(store, run)
    pages = store.db.execute("PRAGMA page_count").fetchone()[0]
    store.db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full from here on
    big = RunOutcome(**{**OUTCOME.__dict__, "timeline": [{"step": i, "score": 0.5}
                                                         for i in range(20000)]})  # fmt: skip
    with pytest.raises(ResultsStoreError, match="database or disk is full. Free disk space"):
        store.finish(run.run_id, big, wall_time=1.0)
    record = row(store, run.run_id)
    assert record.status == "running" and record.score is None
    assert record.timeline is None and record.finished_at is None
    store.db.execute("PRAGMA max_page_count = 1073741823")  # space again: the write succeeds
    store.finish(run.run_id, OUTCOME, wall_time=1.0)
    assert row(store, run.run_id).status == "done"


def test_a_record_round_trips_through_its_row_and_the_store(store):
    run = spec()
    start(store, run)
    store.finish(run.run_id, OUTCOME, wall_time=1.0)
    (record,) = store.rows()
    assert RunRecord.from_row(record.to_row()) == record
    assert record.value("score") == 0.75 and record.value("test_accuracy") == 0.9
    assert record.value("no_such_metric") is None
    assert record.design_id == run.design_id
    moved = record.to_row() | {"status": "failed"}
    store.put_rows([RunRecord.from_row(moved)])
    assert row(store, run.run_id).to_row() == moved


def test_a_run_of_an_older_spec_version_keeps_its_recorded_spec(store):
    legacy = spec().model_dump(mode="json", exclude={"protocol", "plugins", "data"})
    legacy |= {"version": 3}
    old = RunSpec.model_validate(legacy)
    record = RunRecord.of(old, score=0.5, metrics={}, spec_doc=legacy)
    store.put_rows([record])
    (back,) = store.rows()
    assert back.spec.version == 3 and back.spec.protocol is None
    assert back.spec_doc == legacy  # not re-dumped with the newer fields' defaults
    assert back.to_row() == record.to_row()


def test_a_spec_this_ssilbench_cannot_read_is_a_clear_error(store):
    run = spec()
    start(store, run)
    newer = run.model_dump(mode="json") | {"version": 99, "new_field": 1}
    _set(store, run.run_id, "spec", json.dumps(newer))
    with pytest.raises(ResultsStoreError, match="spec version 99; this one writes"):
        store.rows(None)
