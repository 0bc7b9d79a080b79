"""Stacked training (ssilbench.train.batched) against the same runs trained one at a time."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ssilbench.api import Stage
from ssilbench.stages import StagePlan
from ssilbench.train.batched import StackedAdam, fit_classifiers, padded_width
from ssilbench.train.checkpoint import RunCheckpoints
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


def test_runs_of_later_groups_say_they_are_queued_until_their_group_trains():
    """Runs of several widths train one group after the other: until its group's turn a
    run's progress says "queued (stacked group K of N)", not "preparing data"."""
    from ssilbench.runner.telemetry import RunTelemetry

    events: list[dict] = []
    problems = [problem(r) for r in range(len(SIZES))]
    budgets = []
    for r, (net, _, _) in enumerate(problems):
        b, _ = budget(net)
        b.plan.telemetry = RunTelemetry(f"r{r}", STEPS, sink=events.append)
        budgets.append(b)
    fit_classifiers(
        [n for n, _, _ in problems], [x for _, x, _ in problems], [y for _, _, y in problems],
        budgets, lr=0.01, batch_sizes=BATCHES, seeds=list(range(len(SIZES))), rule=RULE,
    )  # fmt: skip
    said = [(e["run_id"], e["phase"], e["detail"]) for e in events if e["kind"] == "phase"]
    # Five groups: 6, 7, 40 (full batch), 40 (minibatches of 16) and 300 rows; the first
    # trains at once, each other waits for its turn.
    waits = [(f"r{r}", "queued", f"stacked group {r + 1} of 5") for r in range(1, 5)]
    assert said[:4] == waits
    first_progress = {e["run_id"]: i for i, e in reversed(list(enumerate(events)))
                      if e["kind"] == "progress"}  # fmt: skip
    first_queued = {e["run_id"]: i for i, e in reversed(list(enumerate(events)))
                    if e["kind"] == "phase"}  # fmt: skip
    assert all(first_queued[f"r{r}"] < first_progress[f"r{r}"] for r in range(1, 5))
    # Then, as each later group trains, the runs through the stage say so.
    assert said[4:] == [(f"r{r}", "queued", f"fit trained, stacked group {j + 1} of 5 trains")
                        for j in range(1, 5) for r in range(j)]  # fmt: skip
    last_progress = {e["run_id"]: i for i, e in enumerate(events) if e["kind"] == "progress"}
    last_phase = {e["run_id"]: i for i, e in enumerate(events) if e["kind"] == "phase"}
    assert all(last_phase[f"r{r}"] > last_progress[f"r{r}"] for r in range(4))


def test_a_run_that_leaves_its_stack_says_so_while_its_group_trains_on():
    """Two runs of one shape, 60 and 120 steps: the first leaves the stack at step 60 and
    says so, where it would seem to train on at a frozen step."""
    from ssilbench.runner.telemetry import RunTelemetry

    events: list[dict] = []
    nets, budgets = [], []
    for r, steps in enumerate((60, 120)):
        net, _, _ = problem(2)
        plan = StagePlan([Stage("fit", steps, policy=True)], 50, evaluate=lambda policy: None)
        plan.telemetry = RunTelemetry(f"r{r}", steps, sink=events.append)
        nets.append(net)
        budgets.append(plan.stage("fit", policy=net))
    _, x, y = problem(2)
    fit_classifiers(nets, [x, x], [y, y], budgets, lr=0.01, batch_sizes=[64, 64], seeds=[0, 1],
                    rule=None)  # fmt: skip
    assert [b.used for b in budgets] == [60, 120]
    said = [(e["run_id"], e["phase"], e["detail"]) for e in events if e["kind"] == "phase"]
    assert said == [("r0", "queued", "fit trained, its stacked group trains on")]
    r0 = [e for e in events if e["run_id"] == "r0"]
    assert r0[-1]["kind"] == "phase"  # its last word, until its next stage or its end


def test_padded_widths_depend_on_the_width_alone_and_bound_the_padding():
    widths = range(1, 3000)
    padded = [padded_width(w) for w in widths]
    assert all(w <= p <= max(8, 1.25 * w) for w, p in zip(widths, padded, strict=True))
    assert padded == sorted(padded)  # a wider run never gets fewer rows
    assert [padded_width(w) for w in (8, 9, 33, 64, 65, 1273)] == [8, 10, 40, 64, 80, 1280]


class Killed(Exception):
    pass


DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")),
]


def kill_at(monkeypatch, kill_at_step: int) -> None:
    """Make the ``kill_at_step``-th optimiser step (counted from now) raise ``Killed``."""
    step, calls = StackedAdam.step, [0]

    def killing(self):
        calls[0] += 1
        if calls[0] == kill_at_step:
            raise Killed
        step(self)

    monkeypatch.setattr(StackedAdam, "step", killing)


def stacked_fit(folder, device: str, kill_at_step: int | None = None, monkeypatch=None):
    """The runs of ``problem`` fitted together on ``device``, each saving its checkpoint every
    20 steps under ``folder``; with ``kill_at_step``, the fit is killed at that optimiser
    step (counted over every group)."""
    problems = [problem(r) for r in range(len(SIZES))]
    nets = [net.to(device) for net, _, _ in problems]
    budgets = []
    for r, net in enumerate(nets):
        plan = StagePlan([Stage("fit", STEPS, policy=True)], 50, evaluate=lambda policy: None,
                         checkpoints=RunCheckpoints(folder / str(r), 20, []))  # fmt: skip
        budgets.append(plan.stage("fit", policy=net))
    if kill_at_step is not None:
        kill_at(monkeypatch, kill_at_step)
    fit_classifiers(
        nets, [x.to(device) for _, x, _ in problems], [y.to(device) for _, _, y in problems],
        budgets, lr=0.01, batch_sizes=BATCHES, seeds=list(range(len(SIZES))), rule=RULE,
    )  # fmt: skip
    return nets, budgets


@pytest.mark.parametrize("device", DEVICES)
def test_a_stacked_fit_resumed_from_its_checkpoints_ends_where_an_uninterrupted_one_does(
    tmp_path, monkeypatch, device
):
    reference, reference_budgets = stacked_fit(tmp_path / "a", device)
    with pytest.raises(Killed):
        stacked_fit(tmp_path / "b", device, kill_at_step=330, monkeypatch=monkeypatch)
    monkeypatch.undo()
    saved = sorted(p.parent.name for p in (tmp_path / "b").glob("*/fit.pt"))
    assert saved, "the killed fit should have left checkpoints to resume from"
    resumed, budgets = stacked_fit(tmp_path / "b", device)
    # Full-batch and minibatch runs went on from checkpoints (runs 2 and 4), runs whose first
    # check had stopped them started over.
    assert [bool(b.resumed_from) for b in budgets] == [False, True, True, True, True]
    assert [b.used for b in budgets] == [b.used for b in reference_budgets]
    for a, b in zip(reference, resumed, strict=True):
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.equal(pa, pb)


def same_shape_fit(folder, runs: list[int]) -> tuple:
    """Runs of one shape (40 rows, minibatch 16, their own seeds), no stopping rule,
    checkpoints every 20 steps; returns their nets and budgets."""
    nets, xs, ys, budgets = [], [], [], []
    for r in runs:
        g = torch.Generator().manual_seed(r)
        x = torch.randn(40, 3, generator=g, dtype=torch.float64)
        torch.manual_seed(100 + r)
        nets.append(nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 4)).double())
        xs.append(x)
        ys.append((x[:, 0] > 0).long() + 2 * (x[:, 1] > 0.5).long())
        plan = StagePlan([Stage("fit", STEPS, policy=True)], 50, evaluate=lambda policy: None,
                         checkpoints=RunCheckpoints(folder / str(r), 20, []))  # fmt: skip
        budgets.append(plan.stage("fit", policy=nets[-1]))
    fit_classifiers(nets, xs, ys, budgets, lr=0.01, batch_sizes=[16] * len(runs), seeds=runs,
                    rule=None)  # fmt: skip
    return nets, budgets


def test_runs_resumed_from_different_steps_catch_up_and_train_as_one_group(tmp_path, monkeypatch):
    runs = [0, 1, 2, 3]
    reference, _ = same_shape_fit(tmp_path / "a", runs)
    # Each run killed on its own after 0, 20, 40 and 60 steps: checkpoints at different steps.
    step = StackedAdam.step
    for r, kill_after in zip(runs[1:], (20, 40, 60), strict=True):
        kill_at(monkeypatch, kill_after + 1)
        with pytest.raises(Killed):
            same_shape_fit(tmp_path / "b", [r])
        monkeypatch.setattr(StackedAdam, "step", step)
    taken = [0]

    def counting(self):
        taken[0] += 1
        step(self)

    monkeypatch.setattr(StackedAdam, "step", counting)
    resumed, budgets = same_shape_fit(tmp_path / "b", runs)
    assert [b.resumed_from for b in budgets] == [None, 20, 40, 60]
    assert [b.used for b in budgets] == [STEPS] * 4
    # The run furthest behind sets the cost: 120 stacked steps, not 120 + 100 + 80 + 60.
    assert taken[0] == STEPS
    for a, b in zip(reference, resumed, strict=True):
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
            assert torch.equal(pa, pb)
