"""Evaluation overlapped with training gives the same records as evaluation in line."""

from __future__ import annotations

import random
import threading
import time

import pytest
import torch

from ssilbench.api import Policy
from ssilbench.eval.overlap import OverlappedEvaluation
from ssilbench.planning.plan import build_plan
from ssilbench.plugins import load_plugins
from ssilbench.runner.worker import execute, execute_many
from ssilbench.runs.spec import Sweep

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


class _Gate:
    """A record that holds the evaluation of ``held_step`` until released, and keeps what
    each evaluation saw, in the order they ran."""

    def __init__(self, held_step: int = 0, failing_step: int | None = None) -> None:
        self.held_step, self.failing_step = held_step, failing_step
        self.started, self.release = threading.Event(), threading.Event()
        self.seen: list[tuple[int, float]] = []

    def __call__(self, policy, step: int) -> None:
        if step == self.held_step:
            self.started.set()
            assert self.release.wait(timeout=30), "the test never released the evaluation"
        if step == self.failing_step:
            raise RuntimeError(f"rollout {step} failed")
        self.seen.append((step, float(policy.value)))


class _Snapshots(_Counter):
    """Counts the snapshots taken of it."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = 0

    def snapshot(self):
        self.taken += 1
        return super().snapshot()


def test_submit_returns_while_an_evaluation_runs():
    gate = _Gate()
    overlapped = OverlappedEvaluation(gate, CPU)
    policy = _Counter()
    try:
        for step in range(3):
            policy.value += 1
            overlapped.submit(policy, step)
            assert gate.started.wait(timeout=30)
        assert gate.seen == [] and len(overlapped.pending) == 3  # none waited for step 0
        gate.release.set()
        overlapped.wait()
        assert gate.seen == [(0, 1.0), (1, 2.0), (2, 3.0)] and not overlapped.pending
    finally:
        gate.release.set()
        overlapped.close()


def test_queued_records_are_the_in_line_records():
    """Evaluations of uneven length pile up behind each other and are recorded in step
    order with the weights of their step, exactly as evaluating in line records them."""
    rng = random.Random(0)

    def record(into):
        def run(policy, step):
            time.sleep(rng.choice([0.0, 0.0, 0.01, 0.03]))
            into.append((step, float(policy.value) * step))

        return run

    inline, queued = [], []
    overlapped = OverlappedEvaluation(record(queued), CPU, max_pending=3)
    policy = _Counter()
    for step in range(0, 400, 20):
        policy.value += step % 7  # training changes the weights between submissions
        record(inline)(policy, step)
        overlapped.submit(policy, step)
    overlapped.close()
    assert queued == inline and len(queued) == 20


def test_the_queue_is_bounded():
    gate = _Gate()
    overlapped = OverlappedEvaluation(gate, CPU, max_pending=2)
    policy = _Snapshots()
    try:
        overlapped.submit(policy, 0)
        overlapped.submit(policy, 1)
        third = threading.Thread(target=overlapped.submit, args=(policy, 2))
        third.start()
        third.join(timeout=0.3)
        # The third submission waits for the evaluation of step 0 before taking a snapshot.
        assert third.is_alive() and policy.taken == 2
        gate.release.set()
        third.join(timeout=30)
        assert not third.is_alive() and policy.taken == 3
        overlapped.wait()
    finally:
        gate.release.set()
        overlapped.close()
    assert [step for step, _ in gate.seen] == [0, 1, 2]


def test_an_error_stops_the_queue_and_surfaces_once_at_wait():
    gate = _Gate(held_step=0, failing_step=1)
    overlapped = OverlappedEvaluation(gate, CPU)
    for step in range(4):
        overlapped.submit(_Counter(), step)
    gate.release.set()
    with pytest.raises(RuntimeError, match="rollout 1 failed"):
        overlapped.wait()
    overlapped.close()  # raised once: closing after it is quiet
    assert [step for step, _ in gate.seen] == [0]  # no record after the failed one


def test_an_error_surfaces_at_close_and_at_the_next_submit():
    gate = _Gate(held_step=-1, failing_step=0)
    overlapped = OverlappedEvaluation(gate, CPU)
    overlapped.submit(_Counter(), 0)
    with pytest.raises(RuntimeError, match="rollout 0 failed"):
        overlapped.close()

    overlapped = OverlappedEvaluation(gate, CPU)
    overlapped.submit(_Counter(), 0)
    assert overlapped.pending[0].exception(timeout=30) is not None  # it has failed by now
    with pytest.raises(RuntimeError, match="rollout 0 failed"):
        overlapped.submit(_Counter(), 1)
    overlapped.close()
