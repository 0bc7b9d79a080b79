"""A short Procgen run end to end, with the time split between training and evaluation,
before and after the evaluation without waste.

``bc`` on ``procgen:bigfish`` (``impala_small``, 200 steps at batch 128, an evaluation of
64 environments every 50 steps: 4 evaluations) on 8,192 transitions imported from synthetic
paper-layout chunks. The evaluations are timed by wrapping the run's ``Evaluator``; the rest
of the run is training (and its setup). BEFORE forwards every observation until the last
episode ends (``run_episodes(forward_finished=True)``); AFTER forwards only the episodes
still running. Both runs train identically (same spec, one torch thread).

Run with ``python -m pytest benchmarks/test_bench_procgen_run.py -s`` (a few minutes on a
CPU).
"""

from __future__ import annotations

import time
from functools import partial

import pytest
import torch

import ssilbench.eval.rollout as rollout
from ssilbench.planning.plan import build_plan
from ssilbench.plugins import load_plugins
from ssilbench.runner.worker import execute
from ssilbench.runs.spec import Sweep
from ssilbench_procgen.chunks import write_synthetic_split
from ssilbench_procgen.environment import ProcgenEnvironment, ProcgenOptions
from ssilbench_procgen.vec_env import procgen_problem

PROCGEN_PROBLEM = procgen_problem()

pytestmark = pytest.mark.skipif(PROCGEN_PROBLEM is not None, reason=str(PROCGEN_PROBLEM))

FRAMES = 8_192
EPISODE = 400
SPLIT: dict[str, dict[str, float]] = {}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    source = tmp_path_factory.mktemp("chunks")
    write_synthetic_split(source / "bigfish" / "train", FRAMES, episode=EPISODE)
    root = tmp_path_factory.mktemp("data")
    ProcgenEnvironment().import_dataset(source, root, ["bigfish"], ProcgenOptions(),
                                        log=lambda _: None)  # fmt: skip
    return root


@pytest.mark.parametrize("mode", ["before", "after"])
def test_short_procgen_run(benchmark, data_root, monkeypatch, mode):
    torch.set_num_threads(1)
    if mode == "before":
        monkeypatch.setattr(rollout, "run_episodes",
                            partial(rollout.run_episodes, forward_finished=True))  # fmt: skip
    spent = {"evaluation": 0.0, "evaluations": 0}
    real = rollout.Evaluator.__call__

    def timed(self, policy):
        began = time.perf_counter()
        try:
            return real(self, policy)
        finally:
            spent["evaluation"] += time.perf_counter() - began
            spent["evaluations"] += 1

    monkeypatch.setattr(rollout.Evaluator, "__call__", timed)
    plugins = load_plugins()
    sweep = Sweep(methods=["bc"], envs=["procgen:bigfish"], budgets=["all"], seeds=[0],
                  steps=200, eval_every=50, config={"arch": "impala_small"})  # fmt: skip
    plan = build_plan(plugins, sweep, data_root)
    [spec] = plan.runs

    def run():
        began = time.perf_counter()
        outcome = execute(spec, plan.method_of(spec), plan.task_of(spec), plugins,
                          torch.device("cpu"))  # fmt: skip
        return time.perf_counter() - began, outcome

    wall, outcome = benchmark.pedantic(run, rounds=1, iterations=1)
    info = {
        "wall_s": round(wall, 1),
        "evaluation_s": round(spent["evaluation"], 1),
        "training_and_setup_s": round(wall - spent["evaluation"], 1),
        "evaluation_share": round(spent["evaluation"] / wall, 3),
        "evaluations": spent["evaluations"],
        "final_return": outcome.timeline[-1]["return"],
    }
    benchmark.extra_info.update(info)
    SPLIT[mode] = info
    print(f"\n  {mode}: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    if len(SPLIT) == 2:
        saved = SPLIT["before"]["evaluation_s"] / max(SPLIT["after"]["evaluation_s"], 1e-9)
        print(f"  evaluation time before / after: {saved:.2f}x")
