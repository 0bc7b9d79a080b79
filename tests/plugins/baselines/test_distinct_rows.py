"""The row-wise networks' stacked fast path (distinct rows) against plain stacked training."""

from __future__ import annotations

import torch

from ssilbench.api import Stage, StagePlan, StoppingRule
from ssilbench.kit import fit_classifier, fit_classifiers
from ssilbench.testing import Stacked, check_stacked_paths
from ssilbench_baselines.architectures import MLP5, LinearClassifier


def _grid_rows(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions on a 6x6 grid, drawn with repetition (as expert trajectories revisit them)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 6, (n, 2), generator=g).double()
    y = (x[:, 0] > x[:, 1]).long() + 2 * (x[:, 0] + x[:, 1] > 5).long()
    return x, y


def _nets(arch, count: int) -> list[torch.nn.Module]:
    nets = []
    for r in range(count):
        torch.manual_seed(r)
        nets.append(arch.build((2,), 4).double())
    return nets


def test_encoding_indexes_a_table_of_the_distinct_rows():
    inputs = [_grid_rows(200, 0)[0], _grid_rows(90, 1)[0]]
    rows, table = MLP5().build((2,), 4).stacked_encode(inputs, batch=200)
    assert len(table) <= 36 and len(torch.unique(table, dim=0)) == len(table)
    for x, ids in zip(inputs, rows, strict=True):
        assert torch.equal(table[ids], x)


def test_distinct_inputs_take_the_plain_path():
    x = torch.randn(100, 2)
    assert MLP5().build((2,), 4).stacked_encode([x], batch=100) is None
    images = torch.zeros(50, 3, 4, 4)
    assert MLP5().build((3, 4, 4), 4).stacked_encode([images], batch=50) is None


def test_fast_path_gives_the_vmap_outputs_and_gradients():
    for arch in (MLP5(), LinearClassifier()):
        inputs = [_grid_rows(64, r)[0] for r in range(3)]
        targets = torch.stack([_grid_rows(64, r)[1] for r in range(3)])
        rows, table = _nets(arch, 1)[0].stacked_encode(inputs, batch=64)
        fast, plain = Stacked(_nets(arch, 3), table), Stacked(_nets(arch, 3))
        check_stacked_paths(fast, plain, torch.stack(rows), torch.stack(inputs), targets)


def test_stacked_mlp_training_over_repeated_rows_matches_runs_trained_alone():
    sizes, rule = [300, 120, 500], StoppingRule(check_every=20, abs_tol=1e-3, rel_tol=0.02)
    data = [_grid_rows(n, r) for r, n in enumerate(sizes)]

    def budget(net):
        plan = StagePlan([Stage("fit", 200, policy=True)], 1000, evaluate=lambda policy: None)
        return plan.stage("fit", policy=net)

    alone = _nets(MLP5(), 3)
    alone_budgets = [budget(n) for n in alone]
    for r, ((x, y), net) in enumerate(zip(data, alone, strict=True)):
        fit_classifier(net, x, y, alone_budgets[r], lr=1e-3, batch_size=256, seed=r, rule=rule)
    stacked = _nets(MLP5(), 3)
    budgets = [budget(n) for n in stacked]
    fit_classifiers(
        stacked, [x for x, _ in data], [y for _, y in data], budgets,
        lr=1e-3, batch_sizes=[256] * 3, seeds=[0, 1, 2], rule=rule,
    )  # fmt: skip
    assert [b.used for b in budgets] == [b.used for b in alone_budgets]
    for a, b in zip(alone, stacked, strict=True):
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
            assert pa.sub(pb).abs().max() < 1e-9
