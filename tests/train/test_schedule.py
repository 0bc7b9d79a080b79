"""The warm-up then linear-decay learning-rate schedule, alone and in stacked training."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ssilbench.api import Stage
from ssilbench.stages import StagePlan
from ssilbench.train.batched import fit_classifiers
from ssilbench.train.loop import optimise
from ssilbench.train.schedule import WarmupLinear
from ssilbench.train.supervised import fit_classifier


def test_factor_rises_then_decays_to_its_end():
    s = WarmupLinear(start=0.1, warmup=0.1, end=0.0)
    total = 100
    factors = [s.factor(step, total) for step in range(total)]
    assert factors[0] == pytest.approx(0.1)
    assert max(factors) == pytest.approx(1.0)
    peak = factors.index(max(factors))
    assert peak == pytest.approx(0.1 * total, abs=1)
    assert all(a <= b for a, b in zip(factors[:peak], factors[1 : peak + 1], strict=True))
    assert all(a >= b for a, b in zip(factors[peak:-1], factors[peak + 1 :], strict=True))
    assert factors[-1] == pytest.approx(0.0, abs=1e-12)


def test_optimise_takes_steps_of_the_scheduled_size():
    """With a constant gradient, Adam's step is exactly the learning rate of that step."""
    p = nn.Parameter(torch.zeros((), dtype=torch.float64))
    plan = StagePlan([Stage("s", 20)], eval_every=100, evaluate=lambda _: None)
    budget = plan.stage("s")
    schedule = WarmupLinear(start=0.5, warmup=0.25, end=0.0)
    values = []

    def loss(rows):
        values.append(float(p.detach()))
        return p * 1.0

    optimise([p], loss, 4, budget, lr=0.1, batch_size=4, seed=0, schedule=schedule)
    values.append(float(p.detach()))
    steps = [a - b for a, b in zip(values, values[1:], strict=False)]
    expected = [0.1 * schedule.factor(i, 20) for i in range(20)]
    assert steps == pytest.approx(expected, rel=1e-6, abs=1e-12)


def _problem(r: int):
    g = torch.Generator().manual_seed(r)
    x = torch.randn(50, 3, generator=g, dtype=torch.float64)
    y = (x[:, 0] > 0).long()
    torch.manual_seed(10 + r)
    net = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 2)).double()
    return net, x, y


def test_stacked_runs_follow_the_same_schedule_as_runs_alone():
    schedule = WarmupLinear(start=0.01, warmup=0.2, end=0.0)

    def budget():
        return StagePlan([Stage("fit", 40)], 100, evaluate=lambda _: None).stage("fit")

    alone = []
    for r in range(3):
        net, x, y = _problem(r)
        fit_classifier(net, x, y, budget(), lr=0.05, batch_size=16, seed=r, schedule=schedule)
        alone.append(net)
    problems = [_problem(r) for r in range(3)]
    fit_classifiers([n for n, _, _ in problems], [x for _, x, _ in problems],
                    [y for _, _, y in problems], [budget() for _ in problems], lr=0.05,
                    batch_sizes=[16] * 3, seeds=[0, 1, 2], rule=None,
                    schedule=schedule)  # fmt: skip
    for a, (b, _, _) in zip(alone, problems, strict=True):
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.allclose(pa, pb, atol=1e-9)
    # ... and the schedule changed the result.
    plain, x, y = _problem(0)
    fit_classifier(plain, x, y, budget(), lr=0.05, batch_size=16, seed=0)
    assert not torch.allclose(plain[0].weight, alone[0][0].weight)
