"""A run's result is a function of its run id (CPU, one torch thread): the same bits whether
the run is trained alone, stacked with other budgets and seeds, stacked with another set of
runs, in a pool of two worker processes, or interrupted and resumed from a checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ssilbench.planning.plan import build_plan
from ssilbench.runner.sweep import run_sweep
from ssilbench.runner.units import PoolSetup
from ssilbench.runner.worker import RunStorage
from ssilbench.runs.spec import Sweep
from ssilbench.runs.store import ResultsStore
from ssilbench.train.checkpoint import RunCheckpoints

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

CPU = torch.device("cpu")
OPTIONS = {"state": "position", "data": "states"}
TARGET = ("0.2", 1)  # the run every case compares: budget, seed

METHODS = {
    "bc": {"arch": "mlp5"},
    "idm_labeling": {"arch": "mlp5"},
    "vm_idm_ground_truth": {"arch": "mlp5", "video_model": "ground_truth"},
    "vm_idm_learned": {"arch": "mlp5", "video_model": "learned"},
}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("data")


def sweep(method: str, budgets: list[str], seeds: list[int], steps: int = 200, **kw) -> Sweep:
    name = "vm_idm" if method.startswith("vm_idm") else method
    return Sweep(methods=[name], envs=["maze:10x10"], budgets=budgets, seeds=seeds,
                 steps=steps, eval_every=100, config=METHODS[method], options=OPTIONS,
                 rollouts=False, **kw)  # fmt: skip


# Where a resumed stage went on from, when, and on which devices the run had trained.
RESUMED = ("resumed_from", "resumed_seconds", "resumed_devices")


def results(plugins, data, folder: Path, plan_of: Sweep, **run) -> dict[tuple, dict]:
    """Every run's recorded numbers by (budget, seed): metrics, evaluations and stages (the
    step and time a resumed stage went on from aside)."""
    with ResultsStore(folder) as store:
        summary = run_sweep(build_plan(plugins, plan_of, data), plugins, store, CPU, **run)
        assert summary.ok and not summary.failed, summary
        rows = store.rows("done")
    out = {}
    for row in rows:
        stages = {name: {k: v for k, v in s.items() if k not in RESUMED}
                  for name, s in row.stages.items()}  # fmt: skip
        out[(row.budget, row.seed)] = {
            "run_id": row.run_id,
            "metrics": row.metrics,
            "timeline": row.timeline,
            "stages": stages,
        }
    return out


@pytest.mark.parametrize("method", list(METHODS))
def test_a_run_is_the_same_alone_and_stacked_with_any_other_runs(plugins, data, tmp_path, method):
    alone = results(plugins, data, tmp_path / "alone", sweep(method, [TARGET[0]], [TARGET[1]]))
    stacked = results(plugins, data, tmp_path / "stacked",
                      sweep(method, ["0.05", "0.2", "0.5", "1.0"], [0, 1]))  # fmt: skip
    other = results(plugins, data, tmp_path / "other", sweep(method, ["0.2", "0.3"], [1, 2]))
    [reference] = alone.values()
    assert reference["metrics"] and reference["timeline"]
    for together in (stacked, other):
        assert together[TARGET] == reference
    # Every other run stacked in both sweeps agrees too.
    for key in stacked.keys() & other.keys():
        assert stacked[key] == other[key]


@pytest.mark.parametrize("stop_early", [True, "paper"])
def test_runs_that_stop_early_are_the_same_alone_and_stacked(plugins, data, tmp_path, stop_early):
    # 1,100 steps, 550 per stage: the named rules check at step 500 of each. Under "paper",
    # the IDM of (0.05, seed 1) stops there and leaves its group while (0.05, seed 0) goes on.
    def run(folder: str, budgets: list[str], seeds: list[int]) -> dict[tuple, dict]:
        plan_of = sweep("idm_labeling", budgets, seeds, 1100, stop_early=stop_early)
        return results(plugins, data, tmp_path / folder, plan_of)

    stacked = run("stacked", ["0.05", "1.0"], [0, 1])
    for seed in (0, 1):
        assert run(f"alone-{seed}", ["0.05"], [seed])[("0.05", seed)] == stacked[("0.05", seed)]
    idm = [r["stages"]["idm"] for r in stacked.values()]
    if stop_early is True:
        assert all(s["stopped_early"] and s["used"] == 500 for s in idm)
    else:
        assert stacked[("0.05", 1)]["stages"]["idm"]["used"] == 500
        assert any(not s["stopped_early"] for s in idm)


def test_a_run_is_the_same_in_a_pool_of_two_workers(plugins, data, tmp_path):
    """Here one stacked unit of four runs; in the pool four runs one at a time, or with
    ``stack=True`` two stacked units, one per budget."""
    budgets, seeds = ["0.05", "0.2"], [0, 1]
    for method in ("bc", "vm_idm_ground_truth"):
        here = results(plugins, data, tmp_path / method, sweep(method, budgets, seeds))
        assert len(here) == 4
        setup = PoolSetup((), data, "cpu", threads=1)
        for stack in (None, True):
            said: list[tuple[str, str]] = []
            pooled = results(plugins, data, tmp_path / f"{method}-pool-{stack}",
                             sweep(method, budgets, seeds), workers=2, setup=setup, stack=stack,
                             on_progress=lambda *event, said=said: said.append(event))  # fmt: skip
            assert pooled == here
            units = " in 2 stacked units" if stack else ""
            assert ("start", f"4 runs{units} on 2 workers") in said


def test_a_pool_claims_a_unit_only_when_a_worker_is_free_for_it(plugins, data, tmp_path):
    """Four runs, one at a time, on two workers: two are claimed at the start and the third
    only once one of them has been recorded, so that runs no worker started stay free for
    another sweep on the store (and `not started` if this one is stopped)."""
    said: list[str] = []
    with ResultsStore(tmp_path / "pool") as store:
        summary = run_sweep(build_plan(plugins, sweep("bc", ["0.05", "0.2"], [0, 1]), data),
                            plugins, store, CPU, workers=2,
                            setup=PoolSetup((), data, "cpu", threads=1),
                            on_progress=lambda event, text: said.append(event))  # fmt: skip
    assert summary.done == 4, summary
    events = [e for e in said if e in ("claimed", "done")]
    assert events[:3] == ["claimed", "claimed", "done"], events
    assert events.count("claimed") == 4 and events[-1] == "done"


class Interrupted(Exception):
    pass


@pytest.mark.parametrize("method", ["bc", "idm_labeling"])
def test_a_stacked_run_resumed_from_its_checkpoint_is_the_same(
    plugins, data, tmp_path, monkeypatch, method
):
    budgets, seeds = ["0.05", "0.2"], [0, 1]
    reference = results(plugins, data, tmp_path / "reference", sweep(method, budgets, seeds, 300))
    storage = RunStorage(checkpoint_root=tmp_path / "checkpoints", checkpoint_every=100)
    # The policy stage's last checkpoint (bc: 300 steps, idm_labeling: 150) of every run.
    last = {"bc": 200, "idm_labeling": 100}[method]
    save = RunCheckpoints.save
    saved: list[str] = []

    def save_then_die(self, stage, state):
        save(self, stage, state)
        saved.append(stage)
        if saved.count("policy") == 4 * (last // 100):  # every run's is written: power cut
            raise Interrupted

    monkeypatch.setattr(RunCheckpoints, "save", save_then_die)
    with ResultsStore(tmp_path / "resumed") as store:
        plan = build_plan(plugins, sweep(method, budgets, seeds, 300), data)
        first = run_sweep(plan, plugins, store, CPU, storage=storage)
    assert first.done == 0 and len(first.failed) == 4 and "Interrupted" in first.failed[0][1]
    monkeypatch.undo()
    resumed = results(plugins, data, tmp_path / "resumed", sweep(method, budgets, seeds, 300),
                      storage=storage, retry_failed=True)  # fmt: skip
    assert resumed == reference
    with ResultsStore(tmp_path / "resumed") as store:
        rows = store.rows("done")
    stages = [row.stages["policy"] for row in rows]
    assert [s.get("resumed_from") for s in stages] == [last] * 4
    # Each run's wall time counts the interrupted attempt up to its checkpoint.
    for s, row in zip(stages, rows, strict=True):
        assert 0 < s["resumed_seconds"] <= row.wall_time
