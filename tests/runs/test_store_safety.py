"""The results store is read without being changed, and `results merge` cannot poison it.

Read commands (leaderboard, status, results export, plot, report, analyze) open the store
read-only and change no byte of the results folder, side files included; a file that is not
an ssilbench store is refused untouched, by them and by the commands that write. Every line
that `results merge` receives is checked before anything is written, all files go in one
transaction, and received unfinished runs are never live claims.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ssilbench.cli import main
from ssilbench.errors import ResultsStoreError, SsilbenchError, UsageError
from ssilbench.runs.records import RunOutcome, RunRecord
from ssilbench.runs.spec import RunSpec, run_id_of
from ssilbench.runs.store import DB_NAME, ResultsStore

DEAD_PID = 2**31 - 1  # above any kernel's pid_max: no such process
OUTCOME = RunOutcome(
    n_labeled=16,
    score=0.75,
    final_score=0.75,
    max_score=0.8,
    report="final",
    normaliser={"name": "success rate", "low": 0.0, "high": 1.0, "source": ""},
    timeline=[{"step": 30, "score": 0.5}, {"step": 60, "score": 0.75}],
    metrics={"test_accuracy": 0.9},
    stages={"policy": {"declared": 60, "used": 60, "stopped_early": None}},
)
STUDY = """
name = "tiny"
metric = "test_accuracy"

[[block]]
methods = ["bc"]
envs = ["maze:10x10"]
budgets = [16]
seeds = [0]
steps = 60
"""


def spec(seed: int = 0) -> RunSpec:
    return RunSpec(method="bc", config={}, env="maze:10x10", options={}, budget="16",
                   seed=seed, steps=60, eval_every=30)  # fmt: skip


def make_store(directory: Path) -> Path:
    """Two done runs and one left running by a process that is gone; returns the folder."""
    with ResultsStore(directory) as store:
        for seed in (0, 1, 2):
            store.start(spec(seed), "bc", "maze:10x10", "cpu", {"ssilbench": "0"})
        for seed in (0, 1):
            store.finish(spec(seed).run_id, OUTCOME, wall_time=2.0)
        store.db.execute("UPDATE runs SET pid = ? WHERE status = 'running'", (DEAD_PID,))
    return directory


def files(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (side files included) -> its sha256."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}  # fmt: skip


def cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def reads(results: Path, tmp: Path) -> list[list[str]]:
    """Every command that only reads the store, against ``results``."""
    study = tmp / "tiny.toml"
    study.write_text(STUDY)
    where = ["--results", str(results)]
    return [
        ["leaderboard", *where],
        ["leaderboard", "--export", "json", *where],
        ["status", *where],
        ["status", "--sweep", str(study), *where],
        ["results", "export", "--all", "--out", str(tmp / "export.jsonl"), *where],
        ["plot", "--sweep", str(study), "--out", str(tmp / "figures"), *where],
        ["report", "--sweep", str(study), "--out", str(tmp / "report" / "report.md"), *where],
        ["analyze", "--env", "procgen:all", "--out", str(tmp / "analysis"), *where],
    ]


# --- Reading changes nothing -------------------------------------------------------------


WRITER = """
import os, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("UPDATE runs SET status = 'done', score = 0.25 WHERE status = 'running'")
if sys.argv[2] == "crash":
    os._exit(0)  # killed: the WAL and its index stay behind
print("ready", flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("state", ["closed", "live writer", "killed writer", "wal without shm"])
def test_read_commands_change_no_byte_of_the_results_folder(tmp_path, capsys, state):
    results = make_store(tmp_path / "results")
    writer = None
    if state != "closed":
        mode = "live" if state == "live writer" else "crash"
        command = [sys.executable, "-c", WRITER, str(results / DB_NAME), mode]
        writer = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if mode == "live":
            assert writer.stdout.readline() == "ready\n"
        else:
            writer.wait(timeout=60)
        assert (results / f"{DB_NAME}-wal").is_file()
        if state == "wal without shm":
            (results / f"{DB_NAME}-shm").unlink()
    try:
        before = files(results)
        for args in reads(results, tmp_path):
            code, out, err = cli(capsys, *args)
            # plot and analyze find no runs of theirs here (exit 2): they read all the same.
            assert code == (2 if args[0] in ("plot", "analyze") else 0), (args, err)
            assert "Traceback" not in err and "results store" not in err, (args, err)
            assert files(results) == before, args
        # The commits still in the WAL are read: the third run is done there.
        code, out, _ = cli(capsys, "status", "--results", str(results))
        assert out.startswith("3 done" if state != "closed" else "2 done, 0 running, 0 failed, 1 ")
    finally:
        if writer is not None and writer.poll() is None:
            writer.stdin.close()
            writer.wait(timeout=60)


TWO_BLOCKS = """
name = "two"
metric = "test_accuracy"

[[block]]
name = "first"
methods = ["bc"]
envs = ["maze:10x10"]
budgets = [16]
seeds = [0]
steps = 60
eval_every = 30

[[block]]
name = "rest"
methods = ["bc"]
envs = ["maze:10x10"]
budgets = [16]
seeds = [1, 2, 3]
steps = 60
eval_every = 30
"""


def test_status_counts_the_runs_of_the_blocks_asked_for(tmp_path, capsys):
    from ssilbench.planning.sweepfile import load_sweep_file, plan_blocks
    from ssilbench.plugins import load_plugins

    study = tmp_path / "two.toml"
    study.write_text(TWO_BLOCKS)
    plan, _ = plan_blocks(load_plugins(), load_sweep_file(study), study, None, False)
    specs = {s.seed: s for s in plan.runs}
    results = tmp_path / "results"
    with ResultsStore(results) as store:  # seeds 0 and 1 done, 2 left running, 3 not started
        for seed in (0, 1, 2):
            store.start(specs[seed], "bc", "maze:10x10", "cpu", {"ssilbench": "0"})
        for seed in (0, 1):
            store.finish(specs[seed].run_id, OUTCOME, wall_time=2.0)
        store.db.execute("UPDATE runs SET pid = ? WHERE status = 'running'", (DEAD_PID,))
    where = ["--results", str(results), "--sweep", str(study)]
    assert cli(capsys, "status", *where)[1].startswith(
        "2 done, 0 running, 0 failed, 1 interrupted, 1 not started"
    )
    assert cli(capsys, "status", *where, "--blocks", "first")[1].startswith(
        "1 done, 0 running, 0 failed, 0 interrupted, 0 not started")  # fmt: skip
    assert cli(capsys, "status", *where, "--blocks", "rest")[1].startswith(
        "1 done, 0 running, 0 failed, 1 interrupted, 1 not started")  # fmt: skip
    before = files(results)
    code, out, err = cli(capsys, "status", *where, "--blocks", "frist")
    assert code == 2 and out == ""
    assert "no block named 'frist'" in err and "first, rest" in err
    code, _, err = cli(capsys, "status", "--results", str(results), "--blocks", "first")
    assert code == 2 and "--blocks needs --sweep FILE." in err
    assert files(results) == before


def test_status_tells_apart_interrupted_runs_of_other_code(tmp_path, capsys):
    """An interrupted run recorded by other plugin code (a plugin edited mid-sweep) is one
    that no sweep run here resumes: said apart, naming what differs, and not to go."""
    from ssilbench.planning.sweepfile import load_sweep_file, plan_blocks
    from ssilbench.plugins import load_plugins

    study = tmp_path / "two.toml"
    study.write_text(TWO_BLOCKS)
    plan, _ = plan_blocks(load_plugins(), load_sweep_file(study), study, None, False)
    specs = {s.seed: s for s in plan.runs}
    edited = specs[3].model_copy(update={"code": {**specs[3].code, "maze": "0" * 16}})
    results = tmp_path / "results"
    with ResultsStore(results) as store:  # seed 0 done; 1 and 3 (other code) interrupted
        for spec in (specs[0], specs[1], edited):
            store.start(spec, "bc", "maze:10x10", "cpu", {"ssilbench": "0"})
        store.finish(specs[0].run_id, OUTCOME, wall_time=2.0)
        store.db.execute("UPDATE runs SET pid = ? WHERE status = 'running'", (DEAD_PID,))
    code, out, _ = cli(capsys, "status", "--results", str(results))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "1 done, 0 running, 0 failed, 2 interrupted"
    assert lines[1].startswith(
        "  1 of the interrupted were recorded by other code than is installed here "
        "(code.maze differs)"
    )
    assert lines[-1].startswith("about ") and ": 1 run at the last hour's" in lines[-1]


def _unprivileged() -> list[str] | None:
    """A command prefix that runs as an ordinary user for whom a 0o555 folder is read-only
    (root writes anyway), or None when there is no such way here."""
    if os.geteuid() != 0:
        return []
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    prefix = [unshare, "--user", "--map-user=1000", "--map-group=1000"]
    probe = subprocess.run([*prefix, "true"], capture_output=True)
    return prefix if probe.returncode == 0 else None


def test_a_store_in_a_read_only_folder_is_read(tmp_path, capsys):
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("running as root, and no user namespace to drop write access in")
    results = make_store(tmp_path / "results")
    before = files(results)
    outside = tmp_path / "out"
    outside.mkdir()
    results.chmod(0o555)
    try:
        if prefix:  # as root: in a user namespace, where the folder's mode holds
            probe = subprocess.run([*prefix, "touch", str(results / "probe")],
                                   capture_output=True)  # fmt: skip
            assert probe.returncode != 0, "the folder should not be writable here"
        for args in reads(results, outside)[:5]:
            if prefix:
                done = subprocess.run([*prefix, sys.executable, "-m", "ssilbench", *args],
                                      capture_output=True, text=True, timeout=300)  # fmt: skip
                code, err = done.returncode, done.stderr
            else:
                code, _, err = cli(capsys, *args)
            assert code == 0, (args, err)
            assert files(results) == before, args
    finally:
        results.chmod(0o755)


# --- A file that is not a store is refused untouched --------------------------------------


def _foreign(path: Path) -> None:
    db = sqlite3.connect(path)  # a rollback-journal database: WAL would change its header
    db.execute("CREATE TABLE notes (text TEXT)")
    db.execute("INSERT INTO notes VALUES ('mine')")
    db.commit()
    db.close()


def _newer(path: Path) -> None:
    make_store(path.parent)
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()


def _other_runs(path: Path) -> None:
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE runs (id INTEGER, name TEXT)")
    db.close()


NOT_STORES = {
    "foreign tables": (_foreign, "no table 'runs'"),
    "empty file": (lambda p: p.write_bytes(b""), "empty (0 bytes)"),
    "random bytes": (lambda p: p.write_bytes(os.urandom(4096)), "not a database"),
    "sqlite header, garbage after": (
        lambda p: p.write_bytes(b"SQLite format 3\x00" + os.urandom(8192)), "results store"),
    "another table called runs": (_other_runs, "lacks the columns"),
    "newer store format": (_newer, "written by a newer ssilbench (store format 99"),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(NOT_STORES))
def test_a_file_that_is_not_a_store_is_refused_untouched(tmp_path, capsys, kind):
    make, message = NOT_STORES[kind]
    results = tmp_path / "results"
    results.mkdir()
    make(results / DB_NAME)
    before = files(results)
    for args in reads(results, tmp_path):
        code, _, err = cli(capsys, *args)
        assert code == 2, (args, err)
        assert message in err and str(results / DB_NAME) in err, (args, err)
        assert err.count("error:") == 1 and "Traceback" not in err
        assert files(results) == before, args
    with pytest.raises(ResultsStoreError, match="results store"):
        ResultsStore.open_read_only(results)
    assert files(results) == before


@pytest.mark.parametrize("kind", [k for k in NOT_STORES if k != "empty file"])
def test_commands_that_write_refuse_a_file_that_is_not_a_store_untouched(tmp_path, capsys, kind):
    exported = tmp_path / "runs.jsonl"
    with ResultsStore(make_store(tmp_path / "source")) as store:
        from ssilbench.runs.exchange import export_results

        export_results(store, exported)
    make, message = NOT_STORES[kind]
    results = tmp_path / "results"
    results.mkdir()
    make(results / DB_NAME)
    before = files(results)
    code, _, err = cli(capsys, "results", "merge", str(exported), "--results", str(results))
    assert code == 2 and message in err and str(results / DB_NAME) in err, err
    with pytest.raises(ResultsStoreError, match=re.escape(message)):
        ResultsStore(results)  # what `run` opens
    assert files(results) == before


def test_an_empty_file_is_a_new_store_to_commands_that_write(tmp_path):
    # What a store interrupted while being created leaves; a sweep makes a store of it.
    (tmp_path / DB_NAME).write_bytes(b"")
    with ResultsStore(tmp_path) as store:
        assert store.rows(None) == []
    with ResultsStore.open_read_only(tmp_path) as store:
        assert store.rows(None) == []


def test_a_read_only_store_cannot_be_written(tmp_path):
    results = make_store(tmp_path / "results")
    before = files(results)
    with ResultsStore.open_read_only(results) as store:
        assert len(store.rows(None)) == 3
        with pytest.raises(ResultsStoreError, match="Cannot write the results store"):
            store.fail(spec(2).run_id, "no", wall_time=1.0)
    assert files(results) == before


# --- results merge: every line checked before anything is written -------------------------


@pytest.fixture
def exported(tmp_path) -> Path:
    from ssilbench.runs.exchange import export_results

    path = tmp_path / "runs.jsonl"
    with ResultsStore(make_store(tmp_path / "source")) as store:
        export_results(store, path, ("done", "running"))
    return path


@pytest.fixture
def target(tmp_path) -> Path:
    """A store with runs of its own (seed 5), which a refused merge must leave as it is."""
    directory = tmp_path / "target"
    with ResultsStore(directory) as store:
        store.start(spec(5), "bc", "maze:10x10", "cpu", {})
        store.finish(spec(5).run_id, OUTCOME, wall_time=1.0)
    return directory


def _edit(path: Path, name: str, line: int, **changes) -> Path:
    lines = path.read_text().splitlines()
    row = json.loads(lines[line - 1])
    row.update(changes)
    lines[line - 1] = json.dumps(row)
    out = path.with_name(name)
    out.write_text("\n".join(lines) + "\n")
    return out


def _respec(row_spec: dict, **changes) -> dict:
    """A spec edited and a run id made to match it, as a careful forger would."""
    doc = {**row_spec, **changes}
    return {"spec": doc, "run_id": run_id_of(doc)}


BAD_FIELDS = [
    ({"score": "abc"}, "'score': Input should be a valid number"),
    ({"score": 1e308}, "'score': Input should be less than or equal to 1000000000000000"),
    ({"score": {"a": 1}}, "'score'"),
    ({"score": True}, "'score'"),
    ({"final_score": float("nan")}, "'final_score': Input should be a finite number"),
    ({"budget": "abc"}, "'budget': Label budget 'abc' is not a positive count"),
    ({"budget": 16}, "'budget': Input should be a valid string"),
    ({"budget": "32"}, "'budget' is \"32\" but its spec says \"16\""),
    ({"seed": 7}, "'seed' is 7 but its spec says"),
    ({"seed": "0"}, "'seed': Input should be a valid integer"),
    ({"method": "vm_idm"}, "'method' is \"vm_idm\" but its spec says \"bc\""),
    ({"env": "maze:20x20"}, "'env' is \"maze:20x20\" but its spec says"),
    ({"metrics": [1, 2]}, "'metrics': Input should be a valid dictionary"),
    ({"metrics": {"acc": "high"}}, "'metrics.acc': Input should be a valid number"),
    ({"metrics": {"acc": 1e300}}, "'metrics.acc'"),
    ({"timeline": {"step": 1}}, "'timeline': Input should be a valid list"),
    ({"timeline": [1, 2]}, "'timeline[0]': Input should be a valid dictionary"),
    ({"timeline": [{"score": 1e300}]}, "'timeline[0]': a value (1e+300) lies"),
    ({"normaliser": [0, 1]}, "'normaliser': Input should be a valid dictionary"),
    ({"normaliser": {"name": "x", "low": "0", "high": 1}},
     "'normaliser.low': Input should be a valid number"),
    ({"stages": "all"}, "'stages': Input should be a valid dictionary"),
    ({"versions": {"torch": json.loads("[" * 40 + "]" * 40)}},
     "nested more than 32 levels deep"),
    ({"started_at": "yesterday"}, "'started_at': Input should be a valid number"),
    ({"finished_at": -1.0}, "'finished_at': Input should be greater than or equal to 0"),
    ({"wall_time": float("inf")}, "'wall_time': Input should be a finite number"),
    ({"pid": "x"}, "'pid': Input should be a valid integer"),
    ({"pid": -1}, "'pid': Input should be greater than or equal to 0"),
    ({"pid": 2**40}, "'pid': Input should be less than or equal to 2147483647"),
    ({"attempts": 1.5}, "'attempts': Input should be a valid integer"),
    ({"n_labeled": 10**30}, "'n_labeled': Input should be less than or equal to"),
    ({"status": "zombie"}, "'status': Input should be 'running', 'done', 'failed' or"),
    ({"host": "\ud800"}, "'host': not valid Unicode text"),
    ({"method_label": ""}, "'method_label': String should have at least 1 character"),
    ({"report": 3}, "'report': Input should be a valid string"),
    ({"colour": "red"}, "unknown field 'colour'"),
]  # fmt: skip


@pytest.mark.parametrize("changes, message", BAD_FIELDS)
def test_a_bad_field_is_refused_naming_file_line_and_field(
    capsys, exported, target, changes, message
):
    bad = _edit(exported, "bad.jsonl", 3, **changes)
    before = files(target)
    # A good file first is not half-merged: every line of every file is checked first.
    code, _, err = cli(capsys, "results", "merge", str(exported), str(bad),
                       "--results", str(target))  # fmt: skip
    assert code == 2, err
    assert f"{bad}, line 3: " in err and message in err, err
    assert err.count("error:") == 1 and "Traceback" not in err
    assert files(target) == before


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"steps": "60"}, 'spec.steps is "60", read as 60'),
        ({"seed": 0.0}, "spec.seed is 0.0, read as 0"),
        ({"config": {"lr": -0.0}}, 'spec.config is {"lr": -0.0}, read as {"lr": 0.0}'),
        ({"steps": "sixty"}, "does not match its spec"),
    ],
)
def test_a_spec_not_written_as_ssilbench_writes_it_is_refused(
    capsys, exported, target, changes, message
):
    # Each would read as a run the store may hold already, under a second run id.
    row = json.loads(exported.read_text().splitlines()[1])
    bad = _edit(exported, "bad.jsonl", 2, **_respec(row["spec"], **changes))
    before = files(target)
    code, _, err = cli(capsys, "results", "merge", str(bad), "--results", str(target))
    assert code == 2 and f"{bad}, line 2: " in err and message in err, err
    assert files(target) == before


@pytest.mark.parametrize(
    "line, message",
    [
        ("[1, 2]", "line 5: a list, not a run"),
        ("1" * 5000, "line 5: not valid JSON (Exceeds the limit"),
        ("[" * 100000 + "]" * 100000, "line 5: not valid JSON (nested too deeply)"),
        ('{"run_id": "x", "spec": {}, "method": "bc"}', "line 5: a run without method_label"),
    ],
)
def test_lines_that_are_not_runs_are_refused(capsys, exported, target, line, message):
    bad = exported.with_name("bad.jsonl")
    bad.write_text(exported.read_text() + line + "\n")
    before = files(target)
    code, _, err = cli(capsys, "results", "merge", str(bad), "--results", str(target))
    assert code == 2 and f"{bad}, {message}" in err, err[:500]
    assert files(target) == before


def test_all_files_go_in_one_transaction(capsys, exported, target, tmp_path, monkeypatch):
    # A second file with a run of its own and a copy of the first's: one commit, or none.
    other = tmp_path / "other.jsonl"
    with ResultsStore(tmp_path / "third") as store:
        store.start(spec(9), "bc", "maze:10x10", "cpu", {})
        store.finish(spec(9).run_id, OUTCOME, wall_time=1.0)
    with ResultsStore.open_read_only(tmp_path / "third") as store:
        from ssilbench.runs.exchange import export_results

        export_results(store, other)
    commits = []
    real = ResultsStore.put_rows

    def counted(self, records, *curves):
        commits.append(len(records))
        return real(self, records, *curves)

    monkeypatch.setattr(ResultsStore, "put_rows", counted)
    code, _, err = cli(capsys, "results", "merge", str(exported), str(other), str(exported),
                       "--results", str(target))  # fmt: skip
    assert code == 0, err
    assert commits == [4]  # seeds 0, 1, 2 and 9, in one put_rows: one transaction
    assert f"{exported}: 3 added" in err and f"{other}: 1 added" in err
    assert f"{exported}: 0 added" in err and "2 already here" in err


def test_received_unfinished_runs_are_never_live_claims(capsys, tmp_path, target):
    # A run 'running' in a live process of this host (pid 1) and one of another host, as
    # a file may carry them: they arrive interrupted, and the next sweep runs them.
    source = tmp_path / "source"
    with ResultsStore(source) as store:
        for seed in (3, 4):
            store.start(spec(seed), "bc", "maze:10x10", "cpu", {})
        store.db.execute("UPDATE runs SET pid = 1, host = ? WHERE seed = 3",
                         (socket.gethostname(),))  # fmt: skip
        store.db.execute("UPDATE runs SET pid = 4242, host = 'elsewhere' WHERE seed = 4")
        from ssilbench.runs.exchange import export_results

        export_results(store, tmp_path / "running.jsonl", ("running",))
    code, _, err = cli(capsys, "results", "merge", str(tmp_path / "running.jsonl"),
                       "--results", str(target))  # fmt: skip
    assert code == 0, err
    assert "2 added" in err and "2 unfinished run(s) recorded as interrupted" in err
    with ResultsStore(target) as store:
        statuses = store.statuses()
        assert statuses[spec(3).run_id] == statuses[spec(4).run_id] == "interrupted"
        # What the next sweep does with each run it plans: both are claimed and run.
        for seed in (3, 4):
            assert store.start(spec(seed), "bc", "maze:10x10", "cpu", {})


def test_a_received_unfinished_copy_does_not_take_a_claim_of_this_store(capsys, tmp_path):
    target = tmp_path / "target"
    with ResultsStore(target) as store:
        store.start(spec(3), "bc", "maze:10x10", "cpu", {})  # a sweep here runs it now
    row = RunRecord.of(spec(3), status="interrupted", host="elsewhere", pid=7).to_row()
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"format": "ssilbench-results", "version": 1}) + "\n"
                    + json.dumps(row) + "\n")  # fmt: skip
    code, _, err = cli(capsys, "results", "merge", str(path), "--results", str(target))
    assert code == 0 and "1 kept" in err, err
    with ResultsStore(target) as store:
        assert store.status(spec(3).run_id) == "running"
        assert store.rows(None)[0].pid == os.getpid()


# --- Property: a received line is refused cleanly, or it reads everywhere ------------------


json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 0.5, 1e15, 1e16, -0.0, 2**31, 2**63]),
    st.text(max_size=8),
    st.sampled_from(["16", "all", "0.5", "bc", "maze:10x10", "done", "running", "\ud800", ""]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
FIELDS = ["method", "method_label", "env", "env_label", "budget", "seed", "status", "attempts",
          "started_at", "finished_at", "wall_time", "n_labeled", "score", "final_score",
          "max_score", "report", "normaliser", "timeline", "metrics", "stages", "versions",
          "device", "host", "pid", "error", "extra"]  # fmt: skip
SPEC_FIELDS = ["method", "env", "budget", "seed", "steps", "config", "options", "stop_early"]


def _base_row(status: str) -> dict:
    record = RunRecord.of(spec(), status=status, attempts=1, started_at=time.time(),
                          finished_at=time.time(), wall_time=2.0, device="cpu", host="h",
                          pid=DEAD_PID, **{k: getattr(OUTCOME, k) for k in (
                              "n_labeled", "score", "final_score", "max_score", "report",
                              "normaliser", "timeline", "metrics", "stages")})  # fmt: skip
    return record.to_row()


finite = st.floats(min_value=-1e15, max_value=1e15, allow_nan=False)
moment = st.floats(min_value=0, max_value=1e15, allow_nan=False)
small_dict = st.dictionaries(st.text(max_size=4), json_value, max_size=3)
# Values of the right type for each column (so that many lines merge), beside arbitrary ones.
PLAUSIBLE = {
    **dict.fromkeys(["method_label", "env_label", "report", "device", "host", "error"],
                    st.text(max_size=10)),
    **dict.fromkeys(["score", "final_score", "max_score"], st.none() | finite),
    **dict.fromkeys(["started_at", "finished_at", "wall_time"], st.none() | moment),
    **dict.fromkeys(["attempts", "n_labeled"], st.none() | st.integers(0, 2**63 - 1)),
    "pid": st.none() | st.integers(0, 2**31 - 1),
    "status": st.sampled_from(["running", "done", "failed", "interrupted"]),
    "metrics": st.dictionaries(st.text(max_size=5), finite, max_size=3),
    "normaliser": st.just({}) | st.fixed_dictionaries(
        {"name": st.text(max_size=5), "low": finite, "high": finite},
        optional={"source": st.text(max_size=5), "more": json_value}),
    "timeline": st.lists(small_dict, max_size=3),
    "stages": small_dict,
    "versions": small_dict,
}  # fmt: skip


SPEC_PLAUSIBLE = {
    "method": st.sampled_from(["bc", "vm_idm"]),
    "env": st.sampled_from(["maze:10x10", "maze:20x20"]),
    "budget": st.sampled_from(["16", "all", "0.5", "32", "016"]),
    "seed": st.integers(-(2**63), 2**63 - 1),
    "steps": st.integers(1, 10**9),
    "config": small_dict,
    "options": small_dict,
    "stop_early": st.booleans(),
}
OPTIONAL = [*PLAUSIBLE, "extra"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    status=st.sampled_from(["done", "running", "failed", "interrupted"]),
    data=st.data(),
    mirror=st.booleans(),
    missing=st.lists(st.sampled_from(OPTIONAL * 4 + FIELDS), max_size=2),
)
def test_a_received_line_is_refused_cleanly_or_read_by_every_reader(status, data, mirror, missing):
    from ssilbench.cli.status import progress_lines
    from ssilbench.leaderboard.board import store_table
    from ssilbench.leaderboard.render import render
    from ssilbench.runs.exchange import merge_files, read_export

    row = _base_row(status)
    spec_changes = {
        key: data.draw(SPEC_PLAUSIBLE[key] | SPEC_PLAUSIBLE[key] | json_value)
        for key in data.draw(st.lists(st.sampled_from(SPEC_FIELDS), unique=True, max_size=2))
    }
    if spec_changes:
        try:
            row.update(_respec(row["spec"], **spec_changes))
        except (ValueError, TypeError):  # not hashable as JSON: the file could not hold it
            return
        if mirror:  # the run's columns changed with its spec
            row.update({k: v for k, v in spec_changes.items() if k in row})
    for key in data.draw(st.lists(st.sampled_from(OPTIONAL * 4 + FIELDS), unique=True,
                                  max_size=4)):  # fmt: skip
        plausible = PLAUSIBLE.get(key)
        row[key] = data.draw(
            json_value if plausible is None else plausible | plausible | json_value
        )
    for key in missing:
        row.pop(key, None)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "in.jsonl"
        try:
            line = json.dumps(row)
        except (ValueError, TypeError):
            return
        path.write_text(json.dumps({"format": "ssilbench-results", "version": 1}) + "\n"
                        + line + "\n")  # fmt: skip
        try:
            runs = read_export(path)
        except (UsageError, ResultsStoreError) as exc:
            event("refused: " + str(exc).split("line 2: ")[-1][:25])
            return  # a clean refusal
        event(f"merged ({status})")
        results = Path(tmp) / "results"
        with ResultsStore(results) as store:
            merge_files(store, [(str(path), runs)])
            store.mark_stale_interrupted()  # what every later sweep does first
            records = store.rows(None)
        with ResultsStore.open_read_only(results) as store:
            assert store.rows(None) == records
        (record,) = records
        assert record.status in ("done", "failed", "interrupted")
        assert RunRecord.from_row(record.to_row()) == record
        assert all(isinstance(line, str) for line in progress_lines(records, None, time.time()))
        for metric in ("score", "test_accuracy"):
            try:
                table = store_table(str(results), metric)
            except SsilbenchError:
                continue
            for fmt in ("md", "csv", "json", "tex", "html"):
                assert isinstance(render(table, fmt), str)
        for value in (record.score, record.final_score, record.wall_time):
            assert value is None or math.isfinite(value)


def test_the_property_test_sees_clean_rows_merge(tmp_path):
    # The unmutated row of the property test merges and reads (it is not refused).
    from ssilbench.runs.exchange import read_export

    path = tmp_path / "in.jsonl"
    path.write_text(textwrap.dedent(f"""\
        {json.dumps({"format": "ssilbench-results", "version": 1})}
        {json.dumps(_base_row("done"))}
        """))  # fmt: skip
    (record,) = read_export(path)
    assert record.run_id == spec().run_id and record.score == 0.75
