"""Push-T speeds: vector-env rollout steps/s with pixels, and replay-import frames/s.

Run with ``python -m pytest benchmarks/test_bench_pusht_env.py`` (not part of the default
test run). The numbers are printed and kept in the benchmark's ``extra_info``. The replay
file is recorded from real rollouts (float32 frames, as the published file) and repeated
to a few thousand frames so the import rate is not dominated by start-up costs.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from ssilbench_pusht.environment import PushTEnvironment, PushTOptions
from ssilbench_pusht.vec_env import pusht_available

pytestmark = pytest.mark.skipif(not pusht_available(), reason="gym-pusht is not installed")

NUM_ENVS = 8
STEPS = 50
IMPORT_EPISODES = 8
REPEAT = 6  # the recorded episodes written this many times: 8 x 6 x 100 = 4,800 frames


@pytest.mark.parametrize("fast_render", [True, False], ids=["tobytes-render", "upstream-render"])
def test_vector_env_steps_per_second(benchmark, fast_render, monkeypatch):
    from ssilbench_pusht import vec_env

    if not fast_render:  # the upstream render, for the gain of the pixel-identical one
        real = vec_env.make_pusht_env
        monkeypatch.setattr(vec_env, "make_pusht_env", lambda fast_render=True: real(False))
    task = PushTEnvironment().load("pusht", PushTOptions())
    venv = task.make_vec_env(NUM_ENVS, seed=0)
    rng = np.random.Generator(np.random.PCG64(0))
    actions = rng.uniform(0, 512, size=(STEPS, NUM_ENVS, 2)).astype(np.float32)
    venv.reset(seed=0)

    def rollout():
        for t in range(STEPS):
            venv.step(actions[t])

    try:
        benchmark.pedantic(rollout, rounds=3, iterations=1, warmup_rounds=1)
    finally:
        venv.close()
    rate = NUM_ENVS * STEPS / benchmark.stats.stats.mean
    benchmark.extra_info["env_steps_per_s"] = rate
    render = "tobytes" if fast_render else "upstream"
    print(f"\npusht vector env ({NUM_ENVS} envs, frame_stack 4, {render} render): "
          f"{rate:.0f} env-steps/s")  # fmt: skip


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> Path:
    from ssilbench_pusht.replay import record_episodes, write_replay_zarr

    recorded = list(record_episodes(IMPORT_EPISODES, seed=0, max_steps=100))
    path = tmp_path_factory.mktemp("replay") / "pusht.zarr"
    write_replay_zarr(path, (e for _ in range(REPEAT) for e in recorded), img_dtype="float32")
    return path


def test_import_frames_per_second(benchmark, replay, tmp_path):
    roots = iter(range(1000))

    def run():
        root = tmp_path / f"data{next(roots)}"
        start = time.perf_counter()
        (store,) = PushTEnvironment().import_dataset(
            replay, root, [], PushTOptions(), log=lambda _: None
        )
        return store.num_frames, time.perf_counter() - start

    frames, _ = benchmark.pedantic(run, rounds=3, iterations=1)
    rate = frames / benchmark.stats.stats.mean
    benchmark.extra_info["frames_per_s"] = rate
    print(f"\npusht import (float32 frames, blosc): {frames} frames, {rate:.0f} frames/s")
