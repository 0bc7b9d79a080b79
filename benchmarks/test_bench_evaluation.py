"""Cost of one Procgen evaluation at the paper's size, before and after the evaluation
without waste: bigfish, 64 environments, an IMPALA-CNN ×4 policy (untrained, random weights,
actions sampled), one torch thread.

- BEFORE: the vector env is built at the evaluation's reset (as every reset did) and every
  observation is forwarded until the last of the 64 episodes ends.
- AFTER: the vector env persists across evaluations (a reset restores the seed's saved
  states) and only the observations of episodes still running are forwarded.

Run with ``python -m pytest benchmarks/test_bench_evaluation.py -s`` (not part of the default
test run; several minutes on a CPU: one round of each). The numbers are printed and kept in
the benchmark's ``extra_info``.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from ssilbench.eval.rollout import Episodes, run_episodes
from ssilbench.plugins import load_plugins
from ssilbench.train.supervised import ClassifierPolicy
from ssilbench_procgen.environment import ProcgenEnvironment, ProcgenOptions
from ssilbench_procgen.vec_env import procgen_problem

PROCGEN_PROBLEM = procgen_problem()

pytestmark = pytest.mark.skipif(PROCGEN_PROBLEM is not None, reason=str(PROCGEN_PROBLEM))

GAME = "bigfish"
NUM_ENVS = 64
RESETS = 5  # of each kind, for the reset cost
CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def task():
    # The protocol whose waste this measures: each environment's first episode, on the
    # same levels at every evaluation (the default scores the first 64 episodes to finish,
    # forwarding every environment until then, on fresh levels).
    options = ProcgenOptions(eval_counting="first_per_env", eval_levels="fixed")
    return ProcgenEnvironment().load(GAME, options)


@pytest.fixture(scope="module")
def policy(task):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    arch = load_plugins(()).architectures.create("impala")
    return ClassifierPolicy(arch.build(task.spec.obs_shape, task.spec.num_actions).eval())


def _evaluate(venv, policy, task, forward_finished: bool) -> Episodes:
    seed = task.spec.eval_seed
    generator = torch.Generator().manual_seed(seed)
    return run_episodes(venv, policy, task.spec, seed, CPU, generator,
                        forward_finished=forward_finished)  # fmt: skip


def _first_build_ms() -> float:
    """Ms of the first reset in a new process: procgen loads its assets at its first build."""
    code = (
        "import time; from ssilbench_procgen.environment import ProcgenEnvironment as E, "
        f"ProcgenOptions as O; v = E().load({GAME!r}, O()).make_vec_env({NUM_ENVS}, seed=0); "
        "t = time.perf_counter(); v.reset(seed=0); print((time.perf_counter() - t) * 1e3)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[-1])


def _reset_ms(task) -> tuple[float, float]:
    """Mean ms of a reset that builds procgen (a seed not seen before; not the process's
    first build) and of one that restores a seed's saved states."""
    venv = task.make_vec_env(NUM_ENVS, seed=0)
    try:
        built, restored = [], []
        for seed in range(RESETS):
            start = time.perf_counter()
            venv.reset(seed=seed)
            built.append(time.perf_counter() - start)
        for seed in range(RESETS):
            start = time.perf_counter()
            venv.reset(seed=seed)
            restored.append(time.perf_counter() - start)
        assert venv.builds == RESETS
    finally:
        venv.close()
    return float(np.mean(built)) * 1e3, float(np.mean(restored)) * 1e3


def test_one_evaluation_before_and_after(benchmark, task, policy):
    fresh = task.make_vec_env(NUM_ENVS, seed=task.spec.eval_seed)
    persisted = task.make_vec_env(NUM_ENVS, seed=task.spec.eval_seed)
    try:
        start = time.perf_counter()
        before = _evaluate(fresh, policy, task, forward_finished=True)
        before_s = time.perf_counter() - start
        persisted.reset(seed=task.spec.eval_seed)  # a run's first evaluation built it
        after = benchmark.pedantic(
            _evaluate, args=(persisted, policy, task, False), rounds=1, iterations=1
        )
        after_s = benchmark.stats["mean"]
        assert persisted.builds == 1
    finally:
        fresh.close()
        persisted.close()
    build_ms, restore_ms = _reset_ms(task)  # procgen was built above: later builds
    info = {
        "episodes": NUM_ENVS,
        "longest_episode": int(before.forwarded // NUM_ENVS),
        "before_s": before_s,
        "after_s": after_s,
        "speedup": before_s / after_s,
        "before_forwarded": before.forwarded,
        "after_forwarded": after.forwarded,
        "forwarded_ratio": before.forwarded / after.forwarded,
        "reset_first_build_ms": _first_build_ms(),
        "reset_rebuild_ms": build_ms,
        "reset_restore_ms": restore_ms,
        "before_mean_return": float(before.scores.mean()),
        "after_mean_return": float(after.scores.mean()),
    }
    benchmark.extra_info.update(info)
    print()
    for key, value in info.items():
        print(f"{key:>20}: {value:.4g}" if isinstance(value, float) else f"{key:>20}: {value}")
    assert len(before.scores) == len(after.scores) == NUM_ENVS
    assert after.forwarded < before.forwarded
