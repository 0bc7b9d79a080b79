"""`ssilbench results export|merge`: moving runs between stores without loss or duplicates."""

from __future__ import annotations

import json
import sqlite3

import pytest
from conftest import TINY


@pytest.fixture
def exported(cli):
    out = cli.run("--method", "bc,vm_idm", "--env", "maze:10x10", "--budgets", "16",
                  "--seeds", "0,1", *TINY)  # fmt: skip
    assert out.returncode == 0, out.stderr
    path = cli.tmp / "runs.jsonl"
    done = cli("results", "export", "--results", str(cli.results), "--out", str(path))
    assert done.returncode == 0 and "wrote 4 run(s)" in done.stderr, done.stderr
    return path


def rows(directory):
    with sqlite3.connect(directory / "results.sqlite") as db:
        found = db.execute("SELECT run_id, status, score, metrics FROM runs ORDER BY run_id")
        return [(i, s, score, json.loads(m or "null")) for i, s, score, m in found]


def test_export_then_merge_reproduces_the_store_and_its_leaderboard(cli, exported):
    other = cli.tmp / "other"
    merged = cli("results", "merge", str(exported), "--results", str(other))
    assert merged.returncode == 0 and "4 added" in merged.stderr, merged.stderr
    assert rows(other) == rows(cli.results)
    board = [cli("leaderboard", "--results", str(d)).stdout for d in (cli.results, other)]
    assert board[0] == board[1] and "| bc |" in board[0]
    again = cli("results", "merge", str(exported), str(exported), "--results", str(other))
    assert again.returncode == 0 and again.stderr.count("4 already here") == 2
    assert len(rows(other)) == 4


def test_a_conflict_exits_1_keeps_the_stores_copy_and_says_how_to_choose(cli, exported):
    lines = exported.read_text().splitlines()
    run = json.loads(lines[1])
    run["score"] = -1.0
    edited = cli.tmp / "edited.jsonl"
    edited.write_text("\n".join([lines[0], json.dumps(run)]) + "\n")
    out = cli("results", "merge", str(edited), "--results", str(cli.results))
    assert out.returncode == 1 and "1 conflict(s)" in out.stderr
    assert f"run {run['run_id'][:12]}" in out.stderr and "-1.0 in" in out.stderr
    assert "--prefer store" in out.stderr and "--prefer incoming" in out.stderr
    assert "Traceback" not in out.stderr
    assert -1.0 not in [score for _, _, score, _ in rows(cli.results)]

    # Choosing the store's copies: the same outcome, and the choice is made (exit 0).
    kept = cli("results", "merge", str(edited), "--results", str(cli.results), "--prefer", "store")
    assert kept.returncode == 0 and "1 conflict(s)" in kept.stderr, kept.stderr
    assert -1.0 not in [score for _, _, score, _ in rows(cli.results)]

    # Choosing the file's copies replaces the store's, and that run only.
    before = {i: score for i, _, score, _ in rows(cli.results)}
    taken = cli("results", "merge", str(edited), "--results", str(cli.results),
                "--prefer", "incoming")  # fmt: skip
    assert taken.returncode == 0, taken.stderr
    after = {i: score for i, _, score, _ in rows(cli.results)}
    assert after == {**before, run["run_id"]: -1.0}


def test_a_finished_copy_replaces_a_failed_one(cli, exported):
    with sqlite3.connect(cli.results / "results.sqlite") as db:
        db.execute("UPDATE runs SET status = 'failed', score = NULL WHERE rowid = 1")
    out = cli("results", "merge", str(exported), "--results", str(cli.results))
    assert out.returncode == 0 and "1 replaced" in out.stderr and "3 already here" in out.stderr
    assert all(status == "done" for _, status, _, _ in rows(cli.results))


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda ls: ['{"format": "ssilbench-results", "version": 99, "ssilbench": "9.0"}', *ls[1:]],
         "reads up to version 2. Upgrade ssilbench"),
        (lambda ls: ls[1:], "line 1: not an ssilbench results export"),
        (lambda ls: [*ls, "{not json"], "line 6: not valid JSON"),
        (lambda ls: [*ls, '{"run_id": "x"}'], "line 6: a run without spec"),
        (lambda ls: [ls[0], ls[1].replace('"run_id": "', '"run_id": "0')],
         "does not match its spec"),
        (lambda ls: [], "is empty"),
    ],
)  # fmt: skip
def test_bad_files_are_refused_with_exit_2_and_nothing_written(cli, exported, edit, message):
    bad = cli.tmp / "bad.jsonl"
    bad.write_text("\n".join(edit(exported.read_text().splitlines())))
    target = cli.tmp / "target"
    # A good file given first is not half-merged: every file is checked before any write.
    out = cli("results", "merge", str(exported), str(bad), "--results", str(target))
    assert out.returncode == 2 and message in out.stderr, out.stderr
    assert str(bad) in out.stderr
    assert not (target / "results.sqlite").exists()


def test_export_errors_exit_2(cli, exported, tmp_path):
    missing = cli("results", "export", "--results", str(tmp_path / "none"), "--out", "x.jsonl")
    assert missing.returncode == 2 and "No results store" in missing.stderr
    blocked = tmp_path / "file"
    blocked.write_text("")
    out = cli("results", "export", "--results", str(cli.results), "--out", str(blocked / "x"))
    assert out.returncode == 2 and "Cannot write" in out.stderr


def test_an_export_line_is_every_column_with_json_decoded_and_merges_back_unchanged(tmp_path):
    # The file format, checked against the store's own columns rather than RunRecord, so
    # that the records the store hands out cannot drift from what older exports hold.
    from ssilbench.runs.exchange import export_results, merge_results, read_export
    from ssilbench.runs.records import RunOutcome
    from ssilbench.runs.spec import RunSpec
    from ssilbench.runs.store import COLUMNS, JSON_COLUMNS, STATUSES, ResultsStore

    specs = [RunSpec(method="bc", config={"lr": 0.001}, env="maze:10x10", options={},
                     budget="16", seed=seed, steps=60, eval_every=30)
             for seed in (0, 1, 2)]  # fmt: skip
    outcome = RunOutcome(n_labeled=16, score=None, final_score=None, max_score=None,
                         report="final", normaliser={}, timeline=[{"step": 30, "score": 0.5}],
                         metrics={"test_accuracy": 0.25},
                         stages={"policy": {"used": 60}})  # fmt: skip
    path = tmp_path / "runs.jsonl"
    with ResultsStore(tmp_path / "a") as store:
        for s in specs:
            store.start(s, "bc (lr=0.001)", "maze:10x10", "cpu", {"ssilbench": "0"})
        store.finish(specs[0].run_id, outcome, wall_time=2.0)
        store.fail(specs[1].run_id, "Traceback ...", wall_time=1.0)
        assert export_results(store, path, ("done", "failed", "running")) == 3
        store.db.row_factory = sqlite3.Row
        expected = [
            {c: json.loads(r[c]) if c in JSON_COLUMNS and r[c] else r[c] for c in COLUMNS}
            for r in store.db.execute("SELECT * FROM runs ORDER BY run_id")  # sorted by id
        ]
    lines = path.read_text().splitlines()
    assert json.loads(lines[0])["runs"] == 3
    assert lines[1:] == [json.dumps(e, sort_keys=True) for e in expected]
    with ResultsStore(tmp_path / "b") as other:
        report = merge_results(other, read_export(path), str(path))
        assert report.added == 3 and report.unfinished == 1
        export_results(other, tmp_path / "again.jsonl", STATUSES)
    # The running run comes back interrupted: a received claim is never live here.
    back = [line.replace('"status": "running"', '"status": "interrupted"') for line in lines[1:]]
    assert (tmp_path / "again.jsonl").read_text().splitlines()[1:] == back


def test_runs_recorded_by_an_older_spec_version_merge_under_their_own_id(tmp_path):
    """An export from before spec version 4 (no protocol, plugins or data fields) merges:
    its run id is the hash of the spec as it was recorded."""
    from ssilbench.runs.exchange import merge_results, read_export
    from ssilbench.runs.spec import run_id_of
    from ssilbench.runs.store import ResultsStore

    old_spec = {"method": "bc", "config": {}, "env": "maze:10x10", "options": {},
                "budget": "16", "seed": 0, "steps": 60, "eval_every": 30, "stop_early": False,
                "rollouts": True, "version": 3}  # fmt: skip
    row = {"run_id": run_id_of(old_spec), "spec": old_spec, "method": "bc",
           "method_label": "bc", "env": "maze:10x10", "env_label": "maze:10x10",
           "budget": "16", "seed": 0, "status": "done", "score": 0.5}  # fmt: skip
    path = tmp_path / "old.jsonl"
    path.write_text(json.dumps({"format": "ssilbench-results", "version": 1, "runs": 1}) + "\n"
                    + json.dumps(row) + "\n")  # fmt: skip
    with ResultsStore(tmp_path / "store") as store:
        summary = merge_results(store, read_export(path), str(path))
        [record] = store.rows("done")
    assert summary.added == 1 and record.run_id == row["run_id"]
    assert record.spec.version == 3 and record.spec_doc == old_spec

    tampered = {**row, "spec": {**old_spec, "seed": 1}}
    path.write_text(path.read_text().splitlines()[0] + "\n" + json.dumps(tampered) + "\n")
    with pytest.raises(Exception, match="does not match its spec"):
        read_export(path)
