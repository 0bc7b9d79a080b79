"""Evaluation overlapped with training gives the same records as evaluation in line."""

from __future__ import annotations

import pytest
import torch

from ssilbench.api import Policy
from ssilbench.eval.overlap import OverlappedEvaluation
from ssilbench.plugins import load_plugins
from ssilbench.runner.plan import build_plan
from ssilbench.runner.spec import Sweep
from ssilbench.runner.worker import execute, execute_many

CPU = torch.device("cpu")


@pytest.fixture(scope="module")
def plan_and_plugins(tmp_path_factory):
    sweep = Sweep(methods=["bc", "idm_labeling"], envs=["maze:10x10"], budgets=["16", "64"],
                  seeds=[0], steps=300, eval_every=100)  # fmt: skip
    plugins = load_plugins()
    return build_plan(plugins, sweep, tmp_path_factory.mktemp("data")), plugins


def _timelines(outcomes):
    return [[{k: v for k, v in e.items()} for e in o.timeline] for o in outcomes]


def test_overlapped_runs_record_what_runs_in_line_record(plan_and_plugins):
    plan, plugins = plan_and_plugins
    spec = next(s for s in plan.runs if s.method == "idm_labeling")
    args = (spec, plan.method_of(spec), plan.task_of(spec), plugins, CPU)
    inline = execute(*args, overlap_eval=False)
    overlapped = execute(*args, overlap_eval=True)
    assert [e["step"] for e in inline.timeline] == [250, 300]  # the policy stage: 150..300
    assert _timelines([overlapped]) == _timelines([inline])
    assert overlapped.score == inline.score


def test_overlapped_stacked_runs_match_too(plan_and_plugins):
    plan, plugins = plan_and_plugins
    specs = [s for s in plan.runs if s.method == "bc"]
    first = specs[0]
    args = (specs, plan.method_of(first), plan.task_of(first), plugins, CPU)
    inline = execute_many(*args, overlap_eval=False)
    overlapped = execute_many(*args, overlap_eval=True)
    assert _timelines(overlapped) == _timelines(inline)


class _Counter(Policy):
    def __init__(self) -> None:
        self.value = torch.zeros(())

    def probs(self, obs):
        return torch.ones(len(obs), 1)


def test_evaluations_see_the_snapshot_and_run_in_order():
    seen = []
    overlapped = OverlappedEvaluation(lambda p, step: seen.append((step, float(p.value))), CPU)
    policy = _Counter()
    for step in range(5):
        policy.value += 1  # training goes on after each submission
        overlapped.submit(policy, step)
    overlapped.close()
    assert seen == [(s, float(s + 1)) for s in range(5)]


def test_an_evaluation_error_reaches_the_training_thread():
    def broken(policy, step):
        raise RuntimeError("rollout failed")

    overlapped = OverlappedEvaluation(broken, CPU)
    overlapped.submit(_Counter(), 0)
    with pytest.raises(RuntimeError, match="rollout failed"):
        overlapped.wait()
    overlapped.close()
