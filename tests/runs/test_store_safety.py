"""The results store is read without being changed, and a file that is not a store is refused.

Read commands (leaderboard, status, results export, plot, report, analyze) open the store
read-only and change no byte of the results folder, side files included; a file that is not
an ssilbench store is refused untouched, by them and by the commands that write. What
`results merge` may receive is tested in test_store_safety_merge.py.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from ssilbench.errors import ResultsStoreError
from ssilbench.runs.store import DB_NAME, ResultsStore

from .small_stores import DEAD_PID, OUTCOME, cli, files, make_store, spec

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


def test_status_of_a_sweep_counts_its_designs_done_by_other_code(tmp_path, capsys):
    """A run of the file's design recorded as done by other code (an earlier release, an
    edited plugin) is not one a sweep here skips, but a report draws it: ``status --sweep``
    counts it as not started and says how many of those a report already has."""
    from ssilbench.planning.sweepfile import load_sweep_file, plan_blocks
    from ssilbench.plugins import load_plugins

    study = tmp_path / "two.toml"
    study.write_text(TWO_BLOCKS)
    plan, _ = plan_blocks(load_plugins(), load_sweep_file(study), study, None, False)
    specs = {s.seed: s for s in plan.runs}
    old = {seed: specs[seed].model_copy(update={"code": {**specs[seed].code, "maze": "0" * 16}})
           for seed in (0, 2, 3)}  # fmt: skip
    results = tmp_path / "results"
    with ResultsStore(results) as store:  # seed 0 done twice, 2 and 3 by other code only
        for spec in (specs[0], *old.values()):
            store.start(spec, "bc", "maze:10x10", "cpu", {"ssilbench": "0"})
            if spec.seed != 3:
                store.finish(spec.run_id, OUTCOME, wall_time=2.0)
        store.db.execute("UPDATE runs SET pid = ? WHERE status = 'running'", (DEAD_PID,))
    code, out, _ = cli(capsys, "status", "--results", str(results), "--sweep", str(study))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "1 done, 0 running, 0 failed, 0 interrupted, 3 not started"
    assert lines[1].startswith(
        "  1 of the not started are recorded as done by other code than is installed here"
    )


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


def _garbage(size: int, wal: bool = False) -> bytes:
    """Seeded bytes after SQLite's magic. ``wal``: byte 19 (the read version) set to 2 and
    byte 18 to 1, which SQLite opens in WAL mode, creating the side files of a plain
    read-only open, as one draw in 256 of unseeded bytes did."""
    body = bytearray(b"SQLite format 3\x00" + random.Random(size).randbytes(size))
    if wal:
        body[18], body[19] = 1, 2
    return bytes(body)


NOT_STORES = {
    "foreign tables": (_foreign, "no table 'runs'"),
    "empty file": (lambda p: p.write_bytes(b""), "empty (0 bytes)"),
    "random bytes": (lambda p: p.write_bytes(random.Random(0).randbytes(4096)), "not a database"),
    "sqlite header, garbage after": (lambda p: p.write_bytes(_garbage(8192)), "results store"),
    "sqlite header marked WAL, garbage after": (
        lambda p: p.write_bytes(_garbage(8192, wal=True)), "results store"),
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
