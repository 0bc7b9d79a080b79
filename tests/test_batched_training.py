"""Stacked training (ssilbench.train.batched) against the same runs trained one at a time."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ssilbench.api import Stage
from ssilbench.train.batched import fit_classifiers, padded_width
from ssilbench.train.budget import StagePlan
from ssilbench.train.loop import StoppingRule
from ssilbench.train.supervised import fit_classifier

# Runs of very different sizes (several width groups), full batch and minibatch, that stop at
# different checks: float64, so that summation order cannot flip a stopping decision.
SIZES = [6, 7, 40, 40, 300]
BATCHES = [64, 64, 64, 16, 64]
RULE = StoppingRule(check_every=10, abs_tol=1e-3, rel_tol=0.02)
STEPS = 120


def problem(r: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(r)
    x = torch.randn(SIZES[r], 3, generator=g, dtype=torch.float64)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0.5).long()
    torch.manual_seed(100 + r)
    net = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 4)).double()
    return net, x, y


def budget(net: nn.Module) -> tuple:
    """A policy stage whose evaluations record what the evaluated module holds then."""
    seen: list[tuple[int, float]] = []
    plan = StagePlan([Stage("fit", STEPS, policy=True)], 50, evaluate=lambda policy: None)
    plan.evaluate = lambda m: seen.append((plan.global_step, float(m[0].weight.detach().sum())))
    return plan.stage("fit", policy=net), seen


def test_stacked_runs_match_runs_trained_alone_even_as_runs_leave_the_stack():
    alone, alone_budgets, alone_seen = [], [], []
    for r in range(len(SIZES)):
        net, x, y = problem(r)
        b, seen = budget(net)
        fit_classifier(net, x, y, b, lr=0.01, batch_size=BATCHES[r], seed=r, rule=RULE)
        alone.append(net)
        alone_budgets.append(b)
        alone_seen.append(seen)
    problems = [problem(r) for r in range(len(SIZES))]
    budgets, seen = zip(*(budget(net) for net, _, _ in problems), strict=True)
    fit_classifiers(
        [n for n, _, _ in problems], [x for _, x, _ in problems], [y for _, _, y in problems],
        budgets, lr=0.01, batch_sizes=BATCHES, seeds=list(range(len(SIZES))), rule=RULE,
    )  # fmt: skip
    used = [b.used for b in alone_budgets]
    assert len(set(used)) > 1, f"the runs should stop at different steps: {used}"
    assert [b.used for b in budgets] == used
    # Every evaluation (periodic, at a stop, at the end) saw the run's weights of that step.
    for a, b in zip(alone_seen, seen, strict=True):
        assert [step for step, _ in a] == [step for step, _ in b]
        assert [v for _, v in b] == pytest.approx([v for _, v in a], abs=1e-9)
    for a, (b, _, _) in zip(alone, problems, strict=True):
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.allclose(pa, pb, atol=1e-9)


def test_padded_widths_depend_on_the_width_alone_and_bound_the_padding():
    widths = range(1, 3000)
    padded = [padded_width(w) for w in widths]
    assert all(w <= p <= max(8, 1.25 * w) for w, p in zip(widths, padded, strict=True))
    assert padded == sorted(padded)  # a wider run never gets fewer rows
    assert [padded_width(w) for w in (8, 9, 33, 64, 65, 1273)] == [8, 10, 40, 64, 80, 1280]
