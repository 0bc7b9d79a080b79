"""Speed of a LIBERO-10 rollout on this machine: env-steps per second with both 128x128
cameras rendered (agent view and wrist), plus the cost of building a simulator and of a
reset (robosuite's hard reset from a fixed initial state, with LIBERO's settle steps).

Run with ``python -m pytest benchmarks/test_bench_libero_env.py`` (not part of the default
test run; needs the 'libero' extra). The numbers are printed and kept in the benchmark's
``extra_info``. Rendering is most of a step's time on a CPU (llvmpipe).
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from ssilbench_libero.environment import Libero10Environment, Libero10Options
from ssilbench_libero.sim import libero_available, render_backend

pytestmark = pytest.mark.skipif(
    not libero_available(), reason="LIBERO is not installed: pip install 'ssilbench[libero]'"
)

TASK = "soup-sauce-basket"
NUM_ENVS = 2
STEPS = 20  # per round, per sub-environment


@pytest.fixture(scope="module")
def venv():
    task = Libero10Environment().load(TASK, Libero10Options(max_steps=10_000))
    env = task.make_vec_env(NUM_ENVS, seed=0)
    started = time.perf_counter()
    env.reset(seed=0)
    env.build_and_first_reset_s = time.perf_counter() - started
    yield env
    env.close()


def test_rollout_steps_per_second(benchmark, venv):
    rng = np.random.Generator(np.random.PCG64(0))
    actions = rng.uniform(-1, 1, size=(STEPS, NUM_ENVS, 7)).astype(np.float32)

    def rollout():
        for step_actions in actions:
            venv.step(step_actions)

    benchmark.pedantic(rollout, rounds=3, iterations=1, warmup_rounds=0)
    per_second = STEPS * NUM_ENVS / benchmark.stats.stats.mean
    benchmark.extra_info.update({
        "render_backend": render_backend(),
        "env_steps_per_second": round(per_second, 2),
        "num_envs": NUM_ENVS,
        "cameras": "agentview + robot0_eye_in_hand, 128x128",
    })  # fmt: skip
    print(f"\nLIBERO-10 {TASK} ({render_backend()}): {per_second:.2f} env-steps/s "
          f"({NUM_ENVS} sub-environments stepped in turn, two 128x128 cameras)")  # fmt: skip


def test_reset_seconds(benchmark, venv):
    benchmark.pedantic(lambda: venv.reset(seed=0), rounds=2, iterations=1, warmup_rounds=0)
    per_env = benchmark.stats.stats.mean / NUM_ENVS
    benchmark.extra_info.update({
        "reset_seconds_per_env": round(per_env, 2),
        "build_and_first_reset_seconds_per_env": round(venv.build_and_first_reset_s / NUM_ENVS, 2),
    })  # fmt: skip
    print(f"\nLIBERO-10 {TASK}: reset {per_env:.2f} s per simulator; build + first reset "
          f"{venv.build_and_first_reset_s / NUM_ENVS:.2f} s per simulator")  # fmt: skip
