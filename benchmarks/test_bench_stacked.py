"""Stacked training steps of the maze studies' panels, with and without the fast paths.

The 1L CNN on maze images (35 runs: 7 splits x 5 seeds) is measured with the distinct-patch
fast path (``ssilbench_baselines.conv_max``) and with the plain ``vmap``-ed convolution it
replaces; the 5L MLP policy stage of the stochastic-expert study (70 runs on the grid's 988
transitions, batch 512) with and without distinct rows (``ssilbench_baselines.distinct_rows``).
Run with ``python -m pytest benchmarks/test_bench_stacked.py`` (one thread: the studies run
one per core).
"""

from __future__ import annotations

import pytest
import torch

from ssilbench.api import Stage
from ssilbench.data.tensors import as_model_input, pair
from ssilbench.stages import StagePlan
from ssilbench.train.batched import fit_classifiers
from ssilbench_baselines.architectures import CNN1, MLP5
from ssilbench_baselines.conv_max import distinct_patch_ids
from ssilbench_maze.environment import MazeEnvironment, MazeOptions
from ssilbench_maze.grid import GridEnvironment

SPLITS = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0]
SEEDS = 5
STEPS = 200


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _runs(size: str):
    test = MazeEnvironment().load(size, MazeOptions(state="image")).test_set()
    x = pair(as_model_input(test.obs), as_model_input(test.next_obs))
    y = torch.as_tensor(test.actions, dtype=torch.long)
    inputs, targets = [], []
    for seed in range(SEEDS):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
        for split in SPLITS:
            rows = order[: max(2, round(split * len(x)))]
            inputs.append(x[rows])
            targets.append(y[rows])
    return inputs, targets


class _Plain(torch.nn.Module):
    """The same network without the fast path (no ``stacked_encode``)."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)


def _train(inputs, targets, plain: bool, arch=CNN1, batch: int = 32) -> None:
    nets = []
    for _ in inputs:
        net = arch().build(tuple(inputs[0].shape[1:]), 4)
        nets.append(_Plain(net) if plain else net)
    budgets = [
        StagePlan([Stage("fit", STEPS)], 10**9, evaluate=lambda p: None).stage("fit")
        for _ in inputs
    ]
    fit_classifiers(nets, inputs, targets, budgets, lr=arch.lr, batch_sizes=[batch] * len(inputs),
                    seeds=list(range(len(inputs))), rule=None)  # fmt: skip


@pytest.mark.parametrize("size", ["10x10", "20x20", "50x50"])
@pytest.mark.parametrize("path", ["distinct_patches", "convolution"])
def test_cnn1_stacked_steps(benchmark, size, path):
    """Includes the one-off patch encoding (measured alone below)."""
    if path == "convolution" and size == "50x50":
        pytest.skip("about a second per step: too slow to repeat")
    inputs, targets = _runs(size)
    benchmark.extra_info.update(runs=len(inputs), steps=STEPS)
    benchmark.pedantic(_train, args=(inputs, targets, path == "convolution"), rounds=2)


@pytest.mark.parametrize("size", ["10x10", "20x20", "50x50"])
def test_cnn1_patch_encoding(benchmark, size):
    inputs, _ = _runs(size)
    benchmark.pedantic(distinct_patch_ids, args=(inputs, 3), rounds=2)


@pytest.mark.parametrize("p_right", [1.0, 0.5])
@pytest.mark.parametrize("path", ["distinct_rows", "plain"])
def test_mlp5_grid_policy_steps(benchmark, tmp_path_factory, p_right, path):
    env = GridEnvironment()
    task = env.load("20x20", env.Options(p_right=p_right))
    store = task.dataset(tmp_path_factory.mktemp("grid"))
    rows = store.transition_indices()
    x = as_model_input(store.obs[rows])
    y = torch.as_tensor(store.actions[rows], dtype=torch.long)
    inputs, targets = [x] * 70, [y] * 70
    benchmark.extra_info.update(runs=70, steps=STEPS, distinct_states=len(torch.unique(x, dim=0)))
    benchmark.pedantic(
        _train, args=(inputs, targets, path == "plain"), kwargs={"arch": MLP5, "batch": 512},
        rounds=2,
    )  # fmt: skip
