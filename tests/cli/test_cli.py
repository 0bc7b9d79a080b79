"""End-to-end tests: the ``ssilbench`` command in a subprocess, at tiny step budgets."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import TINY

from ssilbench.testing import cli_exit_code

SWEEP = ["--method", "bc,vm_idm", "--env", "maze:10x10", "--budgets", "16,64", "--seeds", "0,1"]

FAILING_PLUGIN = """
    from pydantic import BaseModel

    from ssilbench.api import Method, Stage, hookimpl


    class Explode(Method):
        description = "raises during training"

        class Config(BaseModel):
            pass

        def stages(self, cfg, total_steps, spec, has_video_model):
            return [Stage("policy", total_steps, policy=True)]

        def fit(self, ctx):
            raise RuntimeError("the explode method always fails")


    @hookimpl
    def ssilbench_register_methods(registry):
        registry.add("explode", "failing_plugin:Explode", "Always raises.")
"""


def _run(cli, *args: str, first: list[str]) -> subprocess.CompletedProcess:
    """``ssilbench FIRST run ARGS`` into the fixture's results and data folders (``cli.run``
    with options of the command line before ``run``: ``-p PLUGIN``, ``--debug``)."""
    return cli(*first, "run", *args, "--results", str(cli.results), "--data-root", str(cli.data))


def test_help_and_list_are_fast_paths(cli):
    result = cli("--help")
    assert result.returncode == 0
    assert "leaderboard" in result.stdout and "run" in result.stdout
    listing = json.loads(cli("list", "--json").stdout)
    names = {(e["kind"], e["name"]) for e in listing["entries"]}
    assert {("method", "bc"), ("method", "idm_labeling"), ("method", "vm_idm")} <= names
    assert ("environment", "maze") in names
    assert listing["broken"] == []
    maze = next(e for e in listing["entries"] if e["name"] == "maze")
    assert maze["plugin"] == "maze" and maze["distribution"] == "ssilbench"


def test_sweep_leaderboard_and_rerun(cli):
    first = cli.run(*SWEEP, *TINY)
    assert first.returncode == 0, first.stderr
    assert "8 run(s) done" in first.stderr
    rows = cli.rows()
    assert len(rows) == 8 and {r[1] for r in rows} == {"done"}

    md = cli("leaderboard", "--results", str(cli.results))
    assert md.returncode == 0
    assert "## maze:10x10" in md.stdout
    assert "| bc |" in md.stdout and "| vm_idm |" in md.stdout
    assert "N_L=16" in md.stdout and "N_L=64" in md.stdout
    assert "success rate" in md.stdout and "**" in md.stdout

    table = list(
        csv.DictReader(
            io.StringIO(cli("leaderboard", "--export", "csv", "--results", str(cli.results)).stdout)
        )
    )
    cells = [r for r in table if r["kind"] == "task"]
    assert len(cells) == 4 and {r["n"] for r in cells} == {"2"}
    # ... and a row per plugin behind the numbers, with its release and code fingerprint
    plugins = {r["method"]: r for r in table if r["kind"] == "plugin"}
    # ... and a row per line on what the numbers stand on: the built dataset, steps, protocol
    origin = {r["metric"]: r["statistic"] for r in table if r["kind"] == "origin"}
    assert set(origin) == {"dataset", "steps", "protocol"}
    assert origin["dataset"].endswith("(built here by ssilbench_maze)")
    assert set(plugins) == {"baselines", "maze"} and len(table) == 9
    assert all(p["metric"].startswith("ssilbench ") and len(p["statistic"]) == 16
               for p in plugins.values())  # fmt: skip
    scores = {r[4] for r in rows}
    assert all(0.0 <= s <= 1.0 for s in scores)

    out = cli.tmp / "board.json"
    written = cli(
        "leaderboard", "--export", "json", "--out", str(out), "--results", str(cli.results)
    )
    assert written.returncode == 0
    data = json.loads(out.read_text())
    assert data["tables"][0]["env"] == "maze:10x10"

    again = cli.run(*SWEEP, *TINY)
    assert again.returncode == 0
    assert "0 run(s) done, 8 already recorded" in again.stderr
    assert cli.rows() == rows  # nothing re-run, nothing duplicated


def test_parallel_workers_record_every_run_once(cli):
    result = cli.run(*SWEEP, *TINY, "--workers", "2")
    assert result.returncode == 0, result.stderr
    rows = cli.rows()
    assert len(rows) == 8 and all(r[1] == "done" and r[2] == 1 for r in rows)


def test_failed_run_is_recorded_and_sweep_continues(cli):
    cli.write_plugin("failing_plugin", FAILING_PLUGIN)
    args = ["--method", "explode,bc", "--env", "maze:10x10", "--budgets", "16", "--seeds", "0",
            *TINY]  # fmt: skip
    result = _run(cli, *args, first=["-p", "failing_plugin"])
    assert result.returncode == 1
    assert "the explode method always fails" in result.stderr
    db = sqlite3.connect(cli.results / "results.sqlite")
    rows = dict(db.execute("SELECT method, status FROM runs").fetchall())
    error = db.execute("SELECT error FROM runs WHERE method = 'explode'").fetchone()[0]
    db.close()
    assert rows == {"explode": "failed", "bc": "done"}
    assert "Traceback" in error and "RuntimeError" in error

    rerun = _run(cli, *args, first=["-p", "failing_plugin"])
    assert rerun.returncode == 1
    assert "--retry-failed" in rerun.stderr and "0 run(s) done" in rerun.stderr

    retried = _run(cli, *args, "--retry-failed", first=["-p", "failing_plugin"])
    assert retried.returncode == 1 and "1 failed" in retried.stderr
    db = sqlite3.connect(cli.results / "results.sqlite")
    attempts = db.execute("SELECT attempts FROM runs WHERE method = 'explode'").fetchone()[0]
    db.close()
    assert attempts == 2


KILLED_SWEEP = ["--method", "bc", "--env", "maze:10x10", "--budgets", "16,32,64,128",
                "--seeds", "0,1", "--steps", "400", "-q"]  # fmt: skip


def test_sigkill_mid_sweep_then_rerun_loses_and_duplicates_nothing(cli):
    args = [sys.executable, "-m", "ssilbench", "run", *KILLED_SWEEP, "--no-stack",
            "--results", str(cli.results), "--data-root", str(cli.data)]  # fmt: skip
    proc = subprocess.Popen(
        args, env=cli.env(), cwd=cli.tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    db_path = cli.results / "results.sqlite"
    deadline = time.monotonic() + 240
    done_before: list[tuple] = []
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if db_path.exists():
                db = sqlite3.connect(db_path)
                done_before = db.execute(
                    "SELECT run_id, finished_at FROM runs WHERE status = 'done'"
                ).fetchall()
                db.close()
                if len(done_before) >= 2:
                    break
            time.sleep(0.2)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert 2 <= len(done_before) < 8, "the sweep should be killed part-way"

    rerun = cli.run(*KILLED_SWEEP)  # stacked this time: both paths record runs once
    assert rerun.returncode == 0, rerun.stderr
    rows = cli.rows()
    assert len(rows) == 8 and all(r[1] == "done" for r in rows)
    by_id = {r[0]: r for r in rows}
    for run_id, finished_at in done_before:
        assert by_id[run_id][2] == 1  # finished before the kill: never run again
        assert by_id[run_id][3] == finished_at


def test_two_sweeps_on_one_store_train_every_run_once(cli):
    # Both start together over the same eight runs (one at a time each): a run one of them
    # is training is skipped by the other, never trained twice.
    cli.run("--method", "bc", "--env", "maze:10x10", "--budgets", "16", *TINY)  # data built
    args = [sys.executable, "-m", "ssilbench", "run", *KILLED_SWEEP, "--no-stack",
            "--results", str(cli.results), "--data-root", str(cli.data)]  # fmt: skip
    procs = [subprocess.Popen(args, env=cli.env(), cwd=cli.tmp, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]  # fmt: skip
    errs = [p.communicate(timeout=600)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    rows = [r for r in cli.rows() if r[0] in _run_ids(cli, KILLED_SWEEP)]
    assert len(rows) == 8 and all(r[1] == "done" and r[2] == 1 for r in rows)
    done = [int(e.split(" run(s) done")[0].split()[-1]) for e in errs]
    assert sum(done) == 8, errs


def _pool_workers(parent: int) -> list[int]:
    """The pool worker processes of ``parent`` (Linux /proc)."""
    found = []
    for stat in os.listdir("/proc"):
        if not stat.isdigit():
            continue
        try:
            with open(f"/proc/{stat}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{stat}/cmdline", "rb") as fh:
                spawned = b"spawn_main" in fh.read()
        except (OSError, ValueError, IndexError):  # gone meanwhile
            continue
        if ppid == parent and spawned:
            found.append(int(stat))
    return found


@pytest.mark.skipif(sys.platform != "linux", reason="workers end with the sweep on Linux")
def test_workers_end_when_the_sweep_process_is_terminated(cli):
    """SIGTERM to the sweep's process alone (a scheduler's pre-emption, `kill PID`) ends its
    pool's workers too: left behind, they would train runs that nobody records."""
    args = [sys.executable, "-m", "ssilbench", "run", "--method", "bc", "--env", "maze:10x10",
            "--budgets", "16,32", "--steps", "1000000", "-q", "--workers", "2",
            "--results", str(cli.results), "--data-root", str(cli.data)]  # fmt: skip
    proc = subprocess.Popen(
        args, env=cli.env(), cwd=cli.tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 240
        while len(workers := _pool_workers(proc.pid)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no pool started"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 60
        while left := [w for w in workers if os.path.exists(f"/proc/{w}")]:
            assert time.monotonic() < deadline, f"workers {left} outlived the sweep"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()


def _run_ids(cli, sweep):
    db = sqlite3.connect(cli.results / "results.sqlite")
    try:
        steps = sweep[sweep.index("--steps") + 1]
        return {
            r
            for (r,) in db.execute(
                "SELECT run_id FROM runs WHERE json_extract(spec, '$.steps') = ?", (int(steps),)
            )
        }
    finally:
        db.close()


def _recorded(cli):
    return cli.rows() if (cli.results / "results.sqlite").exists() else []


BAD_INPUTS = {
    "unknown method": (["--method", "vm_idn"], "Did you mean 'vm_idm'"),
    "unknown family": (["--env", "mzae:10x10"], "Did you mean 'maze'"),
    "unknown task": (["--env", "maze:11x11"], "Unknown maze task '11x11'"),
    "malformed env id": (["--env", "maze:"], "Malformed environment id"),
    "empty budgets": (["--budgets", ","], "budget list is empty"),
    "malformed budget": (["--budgets", "16,abc"], "'abc' is not a positive count"),
    "zero budget": (["--budgets", "0"], "must be a positive count"),
    "budget above dataset": (["--budgets", "100000"], "larger than the dataset"),
    "unknown option": (["-o", "stat=image"], "Did you mean 'state'"),
    "bad option value": (["-o", "state=voxels"], "'state'"),
    "wrong config type": (["-c", "lr=fast"], "'lr'"),
    "unknown config key": (["-c", "archh=lc"], "Did you mean 'arch'"),
    "unfit architecture": (["-c", "arch=cnn1"], "takes image inputs"),
    "bad seeds": (["--seeds", "0,x"], "Seed 'x' is not an integer"),
    "empty seeds": (["--seeds", ","], "seed list is empty"),
    "bad steps": (["--steps", "0"], "--steps must be a positive integer"),
    "bad steps scale": (["--steps-scale", "0"], "--steps-scale must be a positive fraction"),
    "steps and steps scale": (["--steps-scale", "0.5"], "Give --steps or --steps-scale"),
    "malformed config": (["-c", "lr"], "expects KEY=VALUE"),
    "unknown device": (["--device", "tpu0"], "device"),
    "absent device": (["--device", "cuda:7"], "not available here"),
}


def _with(base: list[str], override: list[str]) -> list[str]:
    args = list(base)
    for flag, value in zip(override[::2], override[1::2], strict=True):
        if flag in args and flag not in ("-o", "-c"):
            args[args.index(flag) + 1] = value
        else:
            args += [flag, value]
    return args


def _main(capsys, *args: str) -> tuple[int, str]:
    """The CLI in this process (fast, for the many bad-input cases): (exit code, stderr)."""
    return cli_exit_code(*args), capsys.readouterr().err


def test_bad_inputs_exit_2_with_one_message_and_lose_nothing(cli, capsys):
    assert cli.run(*SWEEP, *TINY).returncode == 0
    before = _recorded(cli)
    assert len(before) == 8
    common = ["--results", str(cli.results), "--data-root", str(cli.data)]
    for name, (override, expected) in BAD_INPUTS.items():
        code, err = _main(capsys, "run", *_with([*SWEEP, *TINY], override), *common)
        assert code == 2, (name, err)
        assert expected in err, (name, err)
        assert "Traceback" not in err, name
        assert "Error:" not in err and "error: " in err, name
        assert _recorded(cli) == before, name
    # The same through a real process: the exit status is what a shell sees.
    result = cli.run(*_with([*SWEEP, *TINY], BAD_INPUTS["unknown method"][0]))
    assert result.returncode == 2 and "Did you mean 'vm_idm'" in result.stderr
    assert "Traceback" not in result.stderr


def test_debug_shows_the_traceback(cli):
    result = _run(cli, "--method", "vm_idn", "--env", "maze:10x10", "--budgets", "16",
                  first=["--debug"])  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" in result.stderr and "UnknownNameError" in result.stderr


def test_unwritable_results_directory(cli):
    blocker = cli.tmp / "not-a-dir"
    blocker.write_text("a file where the results directory should be")
    result = cli(
        "run", *SWEEP, *TINY, "--results", str(blocker / "sub"), "--data-root", str(cli.data)
    )
    assert result.returncode == 2
    assert "not-a-dir" in result.stderr and "--results" in result.stderr
    result = cli("run", *SWEEP, *TINY, "--results", str(blocker), "--data-root", str(cli.data))
    assert result.returncode == 2 and "not a directory" in result.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write to read-only directories")
def test_read_only_results_directory(cli):
    locked = cli.tmp / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        result = cli("run", *SWEEP, *TINY, "--results", str(locked), "--data-root", str(cli.data))
    finally:
        locked.chmod(0o700)
    assert result.returncode == 2 and "not writable" in result.stderr


def test_corrupted_dataset_is_named_and_rebuilt(cli):
    assert cli.run(*SWEEP, *TINY).returncode == 0
    before = cli.rows()
    [obs_file] = list(cli.data.glob("maze/10x10-*/obs.npy"))
    raw = bytearray(obs_file.read_bytes())
    raw[-1] ^= 0xFF
    obs_file.write_bytes(bytes(raw))

    result = cli.run(*_with(SWEEP, ["--seeds", "5"]), *TINY)
    assert result.returncode == 2
    assert str(obs_file) in result.stderr and "does not match its manifest" in result.stderr
    assert cli.rows() == before

    rebuilt = cli("data", "build", "maze:10x10", "--rebuild", "--data-root", str(cli.data))
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert np.load(obs_file).shape[1:] == (2,)
    assert cli.run(*_with(SWEEP, ["--seeds", "5"]), *TINY).returncode == 0


def test_plugin_that_raises_on_import_is_reported_and_others_work(cli):
    cli.write_plugin("broken_plugin", "raise ImportError('missing dependency: quux')\n")
    listing = cli("-p", "broken_plugin", "list", "--json")
    assert listing.returncode == 0
    broken = json.loads(listing.stdout)["broken"]
    assert broken and broken[0]["plugin"] == "broken_plugin"
    assert "missing dependency: quux" in broken[0]["error"]

    text = cli("-p", "broken_plugin", "list")
    assert "broken_plugin" in text.stdout and "quux" in text.stdout

    works = _run(cli, *SWEEP, *TINY, first=["-p", "broken_plugin"])
    assert works.returncode == 0, works.stderr

    missing = _run(cli, *_with(SWEEP, ["--method", "quux_method"]), *TINY,
                   first=["-p", "broken_plugin"])  # fmt: skip
    assert missing.returncode == 2
    assert "broken_plugin" in missing.stderr and "quux" in missing.stderr


def test_plugin_blocking_and_autoload_switch(cli):
    blocked = _run(cli, *SWEEP, *TINY, first=["-p", "no:maze"])
    assert blocked.returncode == 2 and "Unknown environment 'maze'" in blocked.stderr

    env = cli.env()
    env["SSILBENCH_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    listing = subprocess.run(
        [sys.executable, "-m", "ssilbench", "-p", "baselines", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    names = {e["name"] for e in json.loads(listing.stdout)["entries"]}
    assert "bc" in names and "maze" not in names


def test_leaderboard_errors(cli):
    missing = cli("leaderboard", "--results", str(cli.tmp / "nowhere"))
    assert missing.returncode == 2 and "No results store" in missing.stderr
    assert cli.run(*SWEEP, *TINY).returncode == 0
    unknown_metric = cli("leaderboard", "--metric", "accuracyy", "--results", str(cli.results))
    assert unknown_metric.returncode == 2 and "test_accuracy" in unknown_metric.stderr
    accuracy = cli("leaderboard", "--metric", "test_accuracy", "--results", str(cli.results))
    assert accuracy.returncode == 0 and "test_accuracy" in accuracy.stdout
    bad_format = cli("leaderboard", "--export", "pdf", "--results", str(cli.results))
    assert bad_format.returncode == 2
