"""`expert train` and `data collect` report progress: periodic lines (steps or frames of
the total, episodic return, rate, time left) of at most 80 columns, and the expert's
checkpoint written as its config says."""

from __future__ import annotations

import pytest

from ssilbench_procgen.environment import ProcgenEnvironment, ProcgenOptions
from ssilbench_procgen.ppo import ProgressLines
from ssilbench_procgen.vec_env import procgen_problem

PROCGEN_PROBLEM = procgen_problem()

needs_procgen = pytest.mark.skipif(PROCGEN_PROBLEM is not None, reason=str(PROCGEN_PROBLEM))
TINY_PPO = dict(num_envs=2, num_steps=8, epochs=1, minibatches=2, scale=1, checkpoint_every=2)


def test_progress_lines_are_throttled_and_fit_80_columns():
    lines: list[str] = []
    progress = ProgressLines("procgen:bigfish", 25_000_000, lines.append, every=3600)
    progress(10, "rollout")  # not due yet
    assert lines == []
    progress.began -= 1000  # 1,000 s ago: 5,000 steps/s
    progress(5_000_000, lambda: "return 7.25, update 3/100 ckpt" + "x" * 50, force=True)
    [line] = lines
    assert (
        line == "procgen:bigfish: 5M/25M (20%), return 7.25, update 3/100 .., 5000/s, eta 1:06:40"
    )


@needs_procgen
def test_expert_train_and_collect_report_progress(tmp_path, monkeypatch):
    import torch

    from ssilbench_procgen.expert_config import ExpertConfig
    from ssilbench_procgen.ppo import read_checkpoint

    torch.set_num_threads(1)
    monkeypatch.setenv("SSILBENCH_PROGRESS_EVERY", "0.000001")  # a line at every chance
    task = ProcgenEnvironment().load("bigfish", ProcgenOptions(dataset="collected"))
    out = tmp_path / "expert.pt"
    lines: list[str] = []
    task.train_expert(ExpertConfig(steps=48, **TINY_PPO), out, log=lines.append)
    assert all(len(line) <= 80 for line in lines)
    rollout = [line for line in lines if ", rollout, " in line]
    assert rollout and rollout[0].startswith("procgen:bigfish: 2/48 (4%), rollout, return ?, ")
    assert any(line.startswith("procgen:bigfish: 16/48 (33%), optimising") for line in lines)
    updates = [line for line in lines if ", update " in line]
    # checkpoint_every=2: saved after update 2 and at the end, as the design says.
    assert [line.split(", ")[2] for line in updates] == [
        "update 1/3", "update 2/3 ckpt", "update 3/3 ckpt"]  # fmt: skip
    assert all("/s, eta " in line for line in updates)
    assert read_checkpoint(out)["updates"] == 3

    collected: list[str] = []
    task.collect_dataset(out, 120, tmp_path, seed=3, log=collected.append)
    frames = [line for line in collected if line.startswith("collect train: ")]
    assert frames and frames[-1].startswith("collect train: 120/120 (100%), ")
    assert all(len(line) <= 80 and "/s, eta " in line for line in frames)
