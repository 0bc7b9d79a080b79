"""Tests of step-budget accounting (stages, periodic evaluation) and the optimisation loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ssilbench.api import Stage
from ssilbench.runner.telemetry import RunTelemetry
from ssilbench.stages import StagePlan, StepParityError, check_stages
from ssilbench.train.loop import BatchSampler, optimise

POLICY = object()  # any object stands in for the policy being trained


def make_plan(*stages: Stage, eval_every: int = 500) -> tuple[StagePlan, list[int]]:
    """A plan whose evaluate records the global step of each call."""
    calls: list[int] = []
    plan = StagePlan(list(stages), eval_every, evaluate=lambda policy: None)

    def evaluate(policy):
        assert policy is POLICY
        calls.append(plan.global_step)

    plan.evaluate = evaluate
    return plan, calls


def run(budget, steps: int) -> None:
    for _ in range(steps):
        budget.tick()


# --- check_stages ------------------------------------------------------------------------


def test_check_stages_accepts_an_exact_split():
    check_stages([Stage("vm", 300), Stage("idm", 700, policy=True)], 1000, "vm_idm")
    check_stages([Stage("policy", 0, policy=True)], 0, "bc")


def test_check_stages_sum_mismatch():
    with pytest.raises(StepParityError) as info:
        check_stages([Stage("vm", 300), Stage("idm", 600)], 1000, "vm_idm")
    message = str(info.value)
    assert "'vm_idm'" in message and "900" in message and "1000" in message
    assert "vm=300" in message and "idm=600" in message


def test_check_stages_duplicates():
    with pytest.raises(StepParityError, match="duplicate"):
        check_stages([Stage("a", 500), Stage("a", 500)], 1000, "m")


def test_check_stages_negative_steps_even_when_the_sum_matches():
    with pytest.raises(StepParityError, match="negative"):
        check_stages([Stage("a", -100), Stage("b", 1100)], 1000, "m")


# --- StagePlan ---------------------------------------------------------------------------


def test_overspending_a_stage_raises():
    plan, _ = make_plan(Stage("fit", 3))
    budget = plan.stage("fit")
    run(budget, 3)
    assert budget.remaining == 0
    with pytest.raises(StepParityError, match="more than its 3 steps"):
        budget.tick()
    assert budget.used == 3
    assert plan.global_step == 3


def test_global_step_counts_across_stages():
    plan, _ = make_plan(Stage("a", 4), Stage("b", 6))
    run(plan.stage("a"), 4)
    budget = plan.stage("b")
    run(budget, 2)
    assert plan.global_step == 6
    assert budget.remaining == 4


def test_check_spent_reports_every_stage():
    plan, _ = make_plan(Stage("a", 4), Stage("b", 6), Stage("unused", 0))
    run(plan.stage("a"), 4)
    run(plan.stage("b"), 6)
    assert plan.check_spent() == {
        "a": {"declared": 4, "used": 4, "stopped_early": None},
        "b": {"declared": 6, "used": 6, "stopped_early": None},
        "unused": {"declared": 0, "used": 0, "stopped_early": None},
    }


def test_check_spent_catches_an_unfinished_stage():
    plan, _ = make_plan(Stage("a", 4))
    run(plan.stage("a"), 3)
    with pytest.raises(StepParityError, match="'a' spent 3 of its 4 steps"):
        plan.check_spent()


def test_check_spent_catches_a_stage_that_never_ran():
    plan, _ = make_plan(Stage("a", 4), Stage("b", 6))
    run(plan.stage("a"), 4)
    with pytest.raises(StepParityError, match="'b' never ran"):
        plan.check_spent()


def test_an_undeclared_stage_cannot_be_opened():
    plan, _ = make_plan(Stage("a", 4))
    with pytest.raises(StepParityError, match="'b' was not declared"):
        plan.stage("b")


def test_a_side_stage_trains_apart_from_the_runs_steps():
    """A shared initialisation: its own budget, reused through the run's cache, neither in
    the run's global step nor in what ``check_spent`` asks of the declared stages."""
    plan, _ = make_plan(Stage("a", 4))
    plan.cache = object()
    side = plan.side_stage("pretrain", 3)
    assert side.plan.cache is plan.cache and side.stage.steps == 3
    run(side, 3)
    assert side.remaining == 0 and plan.global_step == 0
    with pytest.raises(StepParityError, match="more than its 3 steps"):
        side.tick()
    run(plan.stage("a"), 4)
    assert set(plan.check_spent()) == {"a"}


def test_a_stage_cannot_be_opened_twice():
    plan, _ = make_plan(Stage("a", 4))
    plan.stage("a")
    with pytest.raises(StepParityError, match="opened twice"):
        plan.stage("a")


def test_stop_early_is_allowed_and_recorded():
    plan, _ = make_plan(Stage("a", 10), Stage("b", 5))
    budget = plan.stage("a")
    run(budget, 4)
    budget.stop_early("validation loss stopped improving")
    assert budget.remaining == 0
    run(plan.stage("b"), 5)
    report = plan.check_spent()
    assert report["a"] == {
        "declared": 10,
        "used": 4,
        "stopped_early": "validation loss stopped improving",
    }
    assert report["b"]["stopped_early"] is None


def test_a_stage_that_stops_early_shrinks_the_total_the_run_s_progress_counts_to():
    plan, _ = make_plan(Stage("a", 10), Stage("b", 5), Stage("c", 6))
    plan.telemetry = RunTelemetry("r", 21)
    budget = plan.stage("a")
    run(budget, 4)
    budget.stop_early("converged")
    budget.stop_early("converged")  # said twice, counted once
    assert plan.telemetry.total == 15
    plan.stage("b").replay(2, "converged", reused="cafe")  # a reused stage that stopped early
    assert plan.telemetry.total == 12
    run(plan.stage("c"), 6)  # a stage that runs all its steps leaves the total as it is
    assert plan.telemetry.total == 12 == plan.global_step


# --- periodic evaluation -----------------------------------------------------------------


def test_policy_stage_evaluates_every_eval_every_and_at_the_end():
    plan, calls = make_plan(Stage("policy", 1200, policy=True), eval_every=500)
    run(plan.stage("policy", policy=POLICY), 1200)
    assert calls == [500, 1000, 1200]


def test_no_double_evaluation_when_the_end_is_a_multiple():
    plan, calls = make_plan(Stage("policy", 1000, policy=True), eval_every=250)
    run(plan.stage("policy", policy=POLICY), 1000)
    assert calls == [250, 500, 750, 1000]


def test_evaluation_counts_steps_within_the_policy_stage():
    plan, calls = make_plan(Stage("vm", 300), Stage("idm", 700, policy=True), eval_every=500)
    run(plan.stage("vm", policy=POLICY), 300)  # not a policy stage: never evaluated
    assert calls == []
    run(plan.stage("idm", policy=POLICY), 700)
    assert calls == [800, 1000]  # global steps of stage-local steps 500 and 700


def test_policy_stage_without_a_policy_is_not_evaluated():
    plan, calls = make_plan(Stage("policy", 10, policy=True), eval_every=5)
    run(plan.stage("policy"), 10)
    assert calls == []


def test_stop_early_evaluates_the_policy_once_more():
    plan, calls = make_plan(Stage("policy", 100, policy=True), eval_every=10)
    budget = plan.stage("policy", policy=POLICY)
    run(budget, 25)
    budget.stop_early("converged")
    assert calls == [10, 20, 25]


# --- BatchSampler ------------------------------------------------------------------------


def test_batch_sampler_covers_every_index_once_per_epoch():
    sampler = BatchSampler(12, 4, seed=0)
    epochs = []
    for _ in range(5):
        batches = [sampler.next() for _ in range(3)]
        assert all(isinstance(b, np.ndarray) and len(b) == 4 for b in batches)
        epoch = np.concatenate(batches)
        assert sorted(epoch.tolist()) == list(range(12))
        epochs.append(epoch.tolist())
    assert len({tuple(e) for e in epochs}) > 1  # reshuffled between epochs


def test_batch_sampler_never_repeats_an_index_within_an_epoch():
    sampler = BatchSampler(10, 3, seed=1)
    seen = set()
    for _ in range(20):
        epoch = np.concatenate([sampler.next() for _ in range(3)])
        assert len(set(epoch.tolist())) == 9
        seen |= set(epoch.tolist())
    assert seen == set(range(10))


def test_batch_sampler_is_seeded():
    a = [BatchSampler(50, 7, seed=3).next().tolist() for _ in range(2)]
    assert a[0] == a[1]
    b = BatchSampler(50, 7, seed=4).next().tolist()
    assert b != a[0]


@pytest.mark.parametrize(("n", "batch"), [(8, 8), (8, 100), (1, 1)])
def test_batch_sampler_full_batch_is_a_slice(n, batch):
    sampler = BatchSampler(n, batch, seed=0)
    assert sampler.next() == slice(None)
    assert sampler.next() == slice(None)


def test_batch_sampler_clamps_a_zero_batch_size():
    assert len(BatchSampler(5, 0, seed=0).next()) == 1


def test_batch_sampler_rejects_an_empty_dataset():
    with pytest.raises(ValueError, match="empty"):
        BatchSampler(0, 4, seed=0)


# --- optimise ----------------------------------------------------------------------------


def regression_problem():
    torch.manual_seed(0)
    x = torch.linspace(-1, 1, 64).unsqueeze(1)
    y = 3.0 * x - 0.5
    model = torch.nn.Linear(1, 1)
    calls = []

    def loss_fn(rows):
        calls.append(rows)
        return torch.nn.functional.mse_loss(model(x[rows]), y[rows])

    return model, loss_fn, calls


def test_optimise_spends_exactly_the_budget_and_reduces_the_loss():
    model, loss_fn, calls = regression_problem()
    initial = loss_fn(slice(None)).item()
    calls.clear()
    plan, _ = make_plan(Stage("fit", 150))
    budget = plan.stage("fit")
    last = optimise(model.parameters(), loss_fn, 64, budget, lr=0.05, batch_size=16, seed=0)
    assert budget.used == 150
    assert plan.global_step == 150
    assert len(calls) == 150
    assert all(len(rows) == 16 for rows in calls)
    assert plan.check_spent()["fit"]["used"] == 150
    final = loss_fn(slice(None)).item()
    assert final < 0.01 * initial
    assert np.isfinite(last) and last < 0.05 * initial


def test_optimise_full_batch_passes_a_slice():
    model, loss_fn, calls = regression_problem()
    plan, _ = make_plan(Stage("fit", 5))
    optimise(model.parameters(), loss_fn, 64, plan.stage("fit"), lr=0.01, batch_size=64, seed=0)
    assert calls == [slice(None)] * 5


def test_optimise_stops_when_the_stage_stops_early():
    model, base_loss, calls = regression_problem()
    plan, _ = make_plan(Stage("fit", 100))
    budget = plan.stage("fit")

    def loss_fn(rows):
        if len(calls) == 9:
            budget.stop_early("converged")
        return base_loss(rows)

    optimise(model.parameters(), loss_fn, 64, budget, lr=0.01, batch_size=64, seed=0)
    assert budget.used == 10
    assert plan.check_spent()["fit"] == {"declared": 100, "used": 10, "stopped_early": "converged"}


def test_optimise_with_no_steps_left_returns_nan():
    model, loss_fn, calls = regression_problem()
    plan, _ = make_plan(Stage("fit", 0))
    last = optimise(
        model.parameters(), loss_fn, 64, plan.stage("fit"), lr=0.01, batch_size=8, seed=0
    )
    assert np.isnan(last)
    assert calls == []


def test_optimise_skips_frozen_parameters():
    model, loss_fn, _ = regression_problem()
    model.bias.requires_grad_(False)
    bias = model.bias.detach().clone()
    plan, _ = make_plan(Stage("fit", 20))
    optimise(model.parameters(), loss_fn, 64, plan.stage("fit"), lr=0.05, batch_size=16, seed=0)
    assert torch.equal(model.bias.detach(), bias)
