"""The same sweep under the local, Ray and SLURM (submitit) executors: same runs, same
results, one store; and the executor flags a user can get wrong."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import TINY

pytest.importorskip("ray")
pytest.importorskip("submitit")

SWEEP = ["--method", "bc,vm_idm", "--env", "maze:10x10", "--budgets", "16", *TINY]


def results(directory: Path) -> dict[str, tuple]:
    db = sqlite3.connect(directory / "results.sqlite")
    try:
        rows = db.execute("SELECT run_id, status, score, metrics, stages FROM runs").fetchall()
    finally:
        db.close()
    return {r[0]: (r[1], r[2], json.loads(r[3] or "null"), json.loads(r[4] or "null"))
            for r in rows}  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory):
    """A local Ray head started by the test, as a user's cluster would be."""
    port = _free_port()
    ray = Path(sys.executable).with_name("ray")
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    temp = tmp_path_factory.mktemp("ray")
    start = subprocess.run(
        [str(ray), "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
         f"--temp-dir={temp}", "--disable-usage-stats"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert start.returncode == 0, start.stderr[-3000:]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([str(ray), "stop", "--force"], capture_output=True, env=env, timeout=120)


def test_local_ray_and_submitit_give_the_same_results_into_one_store(cli, ray_cluster):
    local = cli.tmp / "local"
    assert cli("run", *SWEEP, "--seeds", "0,1,2", "--results", str(local),
               "--data-root", str(cli.data)).returncode == 0  # fmt: skip
    # One store, three executors: seed 0 here, seed 1 on Ray, seed 2 as a SLURM array.
    out = cli.run(*SWEEP, "--seeds", "0")
    assert out.returncode == 0, out.stderr
    out = cli.run(*SWEEP, "--seeds", "1", "--executor", "ray", "--ray-address", ray_cluster)
    assert out.returncode == 0 and "2 run(s) done" in out.stderr, out.stderr
    out = cli.run(*SWEEP, "--seeds", "2", "--executor", "slurm", "--slurm-cluster", "local",
                  "--slurm-time", "10")  # fmt: skip
    assert out.returncode == 0 and "2 run(s) done" in out.stderr, out.stderr
    here, reference = results(cli.results), results(local)
    assert set(here) == set(reference) and len(here) == 6
    # Stacked with other seeds or trained alone, a run's numbers agree up to float rounding.
    for run_id, (status, score, metrics, stages) in here.items():
        _, ref_score, ref_metrics, ref_stages = reference[run_id]
        assert status == "done" and stages == ref_stages
        assert score == pytest.approx(ref_score, abs=1e-4)
        assert metrics == pytest.approx(ref_metrics, abs=1e-4), run_id
    # Everything is recorded once: a second pass on Ray runs nothing.
    out = cli.run(*SWEEP, "--seeds", "0,1,2", "--executor", "ray", "--ray-address", ray_cluster)
    assert out.returncode == 0 and "0 run(s) done, 6 already recorded" in out.stderr


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--ray-address", "127.0.0.1:1"], "--ray-address only apply to --executor ray"),
        (["--slurm-partition", "gpu"], "--slurm-partition only apply to --executor slurm"),
        (["--gpus-per-run", "1"], "only apply to --executor ray or slurm"),
        (["--executor", "ray", "--workers", "2"], "--workers is for --executor local"),
        (["--executor", "ray", "--slurm-time", "5"], "only apply to --executor slurm"),
        (["--executor", "slurm"], "no SLURM on this machine"),
        (["--executor", "slurm", "--gpus-per-run", "0.5", "--slurm-cluster", "local"],
         "whole number"),
        (["--executor", "ray", "--ray-address", "127.0.0.1:1"], "Cannot reach a Ray cluster"),
    ],
)  # fmt: skip
def test_executor_flags_a_user_can_get_wrong(cli, flags, message):
    if "no SLURM" in message and any(
        Path(p, "sbatch").exists() for p in os.environ["PATH"].split(os.pathsep)
    ):
        pytest.skip("this machine has SLURM")  # fmt: skip
    out = cli.run(*SWEEP, "--seeds", "0", *flags)
    assert out.returncode == 2 and message in out.stderr, out.stderr
    # Refusals claim nothing: no run is left 'running' (nor recorded at all).
    assert not (cli.results / "results.sqlite").exists() or results(cli.results) == {}


def test_an_executor_that_refuses_after_the_claims_gives_them_back(tmp_path, capsys, monkeypatch):
    from ssilbench.errors import UsageError
    from ssilbench.runner.executors import SlurmExecutor
    from ssilbench.runs.store import ResultsStore
    from ssilbench.testing import cli_exit_code

    def refuse(self, units, setup):
        raise UsageError("the cluster refused the jobs")
        yield  # a generator, as the real one

    monkeypatch.setattr(SlurmExecutor, "run", refuse)
    args = ["run", *SWEEP, "--seeds", "0", "--results", str(tmp_path / "R"), "--data-root",
            str(tmp_path / "D"), "--executor", "slurm", "--slurm-cluster", "local"]  # fmt: skip
    code = cli_exit_code(*args)
    assert code == 2 and "the cluster refused the jobs" in capsys.readouterr().err
    assert results(tmp_path / "R") == {}
    # A retried run that is refused again is left interrupted, its earlier attempt counted.
    with ResultsStore(tmp_path / "R") as store:
        store.db.execute("INSERT INTO runs (run_id, spec, method, method_label, env, "
                         "env_label, budget, seed, status, attempts) VALUES "
                         "('x', '{}', 'bc', 'bc', 'e', 'e', '16', 0, 'running', 2)")  # fmt: skip
        store.db.execute("UPDATE runs SET host = ?, pid = ?", (socket.gethostname(), os.getpid()))
        store.release(["x"])
        assert store.status("x") == "interrupted"


def test_pool_workers_take_one_gpu_each_when_several_are_visible():
    from ssilbench.runner.sweep import worker_device

    assert [worker_device("cuda", k, 4) for k in range(6)] == [
        "cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:0", "cuda:1"]  # fmt: skip
    assert worker_device("cuda", 3, 1) == "cuda"  # one GPU: everyone shares it
    assert worker_device("cuda:2", 1, 4) == "cuda:2"  # an explicit device is kept
    assert worker_device("cpu", 1, 0) == "cpu"
