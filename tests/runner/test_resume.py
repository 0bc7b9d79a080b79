"""Checkpointed runs: a run killed mid-training resumes and ends exactly where an
uninterrupted run ends (CPU, same thread count)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import torch

from ssilbench.api import Stage
from ssilbench.stages import StagePlan
from ssilbench.train.checkpoint import RunCheckpoints
from ssilbench.train.loop import optimise

# --- the loop ------------------------------------------------------------------------------


class Killed(Exception):
    pass


def train(tmp_path, kill_at: int | None = None):
    torch.manual_seed(0)
    x = torch.randn(200, 3)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]]) + 0.1 * torch.randn(200, 1)
    model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    timeline: list[dict] = []
    plan = StagePlan([Stage("fit", 300, policy=True)], 50, evaluate=lambda p: None,
                     checkpoints=RunCheckpoints(tmp_path / "ckpt", 40, timeline))  # fmt: skip
    plan.evaluate = lambda p: timeline.append(
        {"step": plan.global_step, "w": float(model[0].weight.detach().sum())}
    )
    calls = [0]

    def loss_fn(rows):
        calls[0] += 1
        if kill_at is not None and calls[0] == kill_at:
            raise Killed
        return torch.nn.functional.mse_loss(model(x[rows]), y[rows])

    optimise(model.parameters(), loss_fn, 200, plan.stage("fit", policy=model), lr=0.01,
             batch_size=32, seed=3)  # fmt: skip
    return model, timeline


def test_a_stage_resumed_from_its_checkpoint_is_bit_identical(tmp_path):
    reference, ref_timeline = train(tmp_path / "a")
    with pytest.raises(Killed):
        train(tmp_path / "b", kill_at=137)  # after the checkpoint of step 120
    assert (tmp_path / "b" / "ckpt" / "fit.pt").is_file()
    resumed, timeline = train(tmp_path / "b")
    for p, q in zip(reference.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q)
    assert timeline == ref_timeline  # evaluations before the kill came back from the file


class Clock:
    def __init__(self, now: float):
        self.now = now

    def perf_counter(self) -> float:
        return self.now


def test_a_resumed_run_counts_the_time_its_checkpoint_recorded(tmp_path, monkeypatch):
    clock = Clock(100.0)
    monkeypatch.setattr("ssilbench.train.checkpoint.time", clock)
    first = RunCheckpoints(tmp_path, 10, [])
    first.share = 2  # stacked with one other run: half of the attempt's time is this run's
    clock.now = 110.0
    first.save("fit", {"used": 10})
    assert torch.load(tmp_path / "fit.pt", weights_only=True)["seconds"] == 5.0

    clock.now = 500.0  # the next attempt, alone
    again = RunCheckpoints(tmp_path, 10, [])
    clock.now = 504.0  # 4 s to get back to the stage (data, earlier stages)
    assert again.load("fit") == {"used": 10}
    assert again.resumed_seconds == {"fit": 5.0}
    assert again.earlier == 1.0  # the 4 s redone are counted once, in the checkpoint's 5 s
    clock.now = 510.0
    assert again.seconds() == 11.0


def test_a_run_resumed_on_another_device_keeps_the_devices_it_trained_on(tmp_path):
    """A run begun on a GPU and finished on a CPU (its checkpoints carried over) records
    the CPU, where it finished; its stage report and later checkpoints name the GPU too."""
    gpu, cpu = "cuda:0 (NVIDIA H200)", "cpu (x86_64, 1 threads)"
    first = RunCheckpoints(tmp_path, 10, [], gpu)
    first.save("fit", {"used": 10})
    assert torch.load(tmp_path / "fit.pt", weights_only=True)["devices"] == [gpu]
    again = RunCheckpoints(tmp_path, 10, [], cpu)
    assert again.load("fit") == {"used": 10}  # the chain is not part of the stage's state
    assert again.resumed_devices == {"fit": [gpu]}
    again.save("fit", {"used": 20})
    assert torch.load(tmp_path / "fit.pt", weights_only=True)["devices"] == [gpu, cpu]
    third = RunCheckpoints(tmp_path, 10, [], cpu)  # back on the CPU: named once in a row
    third.load("fit")
    assert third.devices() == [gpu, cpu]
    plan = StagePlan([Stage("fit", 30, policy=True)], 10, evaluate=lambda p: None,
                     checkpoints=again)  # fmt: skip
    budget = plan.stage("fit")
    budget.used, budget.resumed_from = 30, 10
    assert plan.check_spent()["fit"]["resumed_devices"] == [gpu]


def test_a_checkpoint_without_a_recorded_time_counts_nothing_earlier(tmp_path):
    torch.save({"used": 10, "timeline": [], "torch_rng": torch.get_rng_state()},
               tmp_path / "fit.pt")  # as written before checkpoints had a time  # fmt: skip
    checkpoints = RunCheckpoints(tmp_path, 10, [])
    assert checkpoints.load("fit") == {"used": 10}
    assert checkpoints.earlier == 0.0 and checkpoints.resumed_seconds == {}
    assert checkpoints.resumed_devices == {}  # nor the devices
    # Its later checkpoints cannot know the run's time either: they say so, and a run
    # resumed from one of them counts nothing earlier.
    checkpoints.save("fit", {"used": 20})
    assert torch.load(tmp_path / "fit.pt", weights_only=True)["seconds"] is None
    again = RunCheckpoints(tmp_path, 10, [])
    assert again.load("fit") == {"used": 20}
    assert again.earlier == 0.0 and again.resumed_seconds == {}


def test_a_damaged_checkpoint_starts_the_stage_over(tmp_path, capsys):
    with pytest.raises(Killed):
        train(tmp_path, kill_at=100)
    (tmp_path / "ckpt" / "fit.pt").write_bytes(b"garbage")
    reference, _ = train(tmp_path / "fresh")
    capsys.readouterr()
    again, _ = train(tmp_path)
    for p, q in zip(reference.parameters(), again.parameters(), strict=True):
        assert torch.equal(p, q)
    said = capsys.readouterr().err
    assert f"checkpoint {tmp_path / 'ckpt' / 'fit.pt'}: not resumed, it does not load" in said
    assert "its stage starts over from step 0" in said


def test_a_checkpoint_of_another_trainer_is_passed_over_with_a_notice(tmp_path, capsys):
    """The stacked trainer and ``optimise`` save different states: neither resumes from the
    other's, and a stage that starts over says so."""
    first = RunCheckpoints(tmp_path, 10, [])
    first.save("fit", {"used": 80_000})
    again = RunCheckpoints(tmp_path, 10, [])
    assert again.load("fit", "stacked") is None
    said = capsys.readouterr().err
    assert said == (f"checkpoint {tmp_path / 'fit.pt'}: not resumed, another trainer wrote it "
                    "at step 80,000; its stage starts over from step 0\n")  # fmt: skip
    assert again.load("fit") == {"used": 80_000}  # its own trainer resumes from it
    assert capsys.readouterr().err == ""


# --- whole sweeps --------------------------------------------------------------------------

# Long enough that the run is killed well before its end (the first checkpoint is at step
# 200 of 3000), short enough to train three times in a test.
SWEEP = ["--method", "bc", "--env", "maze:10x10", "--budgets", "256", "--seeds", "0",
         "-c", "arch=mlp5", "--steps", "3000", "--eval-every", "1000", "--no-rollouts",
         "--checkpoint-every", "200", "-q"]  # fmt: skip


def _result(results):
    db = sqlite3.connect(results / "results.sqlite")
    try:
        rows = db.execute(
            "SELECT status, attempts, wall_time, metrics, timeline, stages FROM runs"
        ).fetchall()
    finally:
        db.close()
    return [(s, a, w, json.loads(m or "null"), json.loads(t or "null"), json.loads(st or "null"))
            for s, a, w, m, t, st in rows]  # fmt: skip


def _wait_for_checkpoint(results, proc, timeout=300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if list((results / "checkpoints").glob("*/policy.pt")):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("kill", ["driver", "worker"])
def test_a_killed_run_resumes_and_matches_an_uninterrupted_one(cli, kill):
    reference = cli.tmp / "reference"
    out = cli("run", *SWEEP, "--results", str(reference), "--data-root", str(cli.data))
    assert out.returncode == 0, out.stderr
    assert not list((reference / "checkpoints").glob("*/*")), "a finished run keeps none"

    workers = ["--workers", "2", "--method", "bc,vm_idm"] if kill == "worker" else []
    args = [sys.executable, "-m", "ssilbench", "run", *SWEEP, *workers,
            "--results", str(cli.results), "--data-root", str(cli.data)]  # fmt: skip
    proc = subprocess.Popen(args, env=cli.env(), cwd=cli.tmp, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert _wait_for_checkpoint(cli.results, proc), "the run should reach a checkpoint"
        if kill == "driver":
            os.kill(proc.pid, signal.SIGKILL)
        else:
            children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                      text=True).stdout.split()  # fmt: skip
            for child in children:  # the pool's workers (and its resource tracker)
                os.kill(int(child), signal.SIGKILL)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    if kill == "worker":
        assert proc.returncode == 1 and "a worker process died" in err, err
    assert list((cli.results / "checkpoints").glob("*/policy.pt"))

    again = cli("run", *SWEEP, *workers, "--results", str(cli.results),
                "--data-root", str(cli.data))  # fmt: skip
    assert again.returncode == 0, again.stderr
    [ref] = _result(reference)
    resumed = [r for r in _result(cli.results) if "policy" in (r[5] or {})]
    assert all(r[0] == "done" for r in _result(cli.results))
    assert resumed[0][1] == 2  # the second attempt finished it
    stages = resumed[0][5]["policy"]
    assert stages.pop("resumed_from") % 200 == 0  # it went on from a checkpoint
    earlier = stages.pop("resumed_seconds")  # the run's time when it saved that checkpoint
    assert 0 < earlier <= resumed[0][2]  # its wall time counts the killed attempt's
    # The killed attempt trained on this machine's CPU, as the finishing one did.
    [device] = stages.pop("resumed_devices")
    assert device.startswith("cpu (") and device.endswith(" threads)")
    assert resumed[0][3:] == ref[3:]  # metrics, timeline and stages: identical
