"""The steps of a sweep on a results store, with an executor that trains nothing: skip what
is recorded, claim what no live sweep holds, record each result, and settle the claims an
executor leaves (given back when it refuses before any run finished, else interrupted)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
import torch

from ssilbench.errors import UsageError
from ssilbench.planning.plan import SweepPlan, build_plan
from ssilbench.runner.sweep import SweepExecution, run_sweep
from ssilbench.runner.units import ExecutorLost, PoolSetup, RunFailure, Unit, WorkerResult
from ssilbench.runs.spec import Sweep
from ssilbench.runs.store import ResultsStore

CPU = torch.device("cpu")
SWEEP = Sweep(methods=["bc"], envs=["maze:10x10"], budgets=["16"], seeds=[0, 1, 2], steps=60,
              options={"state": "position", "data": "states"}, config={"arch": "mlp5"},
              rollouts=False)  # fmt: skip


class Scripted:
    """An executor that hands back a failure for each of the first ``results`` runs it is
    given, then raises ``then`` (None: it ends there)."""

    def __init__(self, results: int, then: Exception | None = None) -> None:
        self.results = results
        self.then = then
        self.given: list[str] = []

    def describe(self) -> str:
        return "a scripted executor"

    def run(self, units: list[Unit], setup: PoolSetup):
        self.given = [spec.run_id for unit in units for spec in unit]
        for run_id in self.given[: self.results]:
            yield WorkerResult(run_id, 0.5, failure=RunFailure("Traceback: boom", "boom"))
        if self.then is not None:
            raise self.then


@pytest.fixture(scope="module")
def plan(plugins, tmp_path_factory) -> SweepPlan:
    return build_plan(plugins, SWEEP, tmp_path_factory.mktemp("data"))


def _sweep(plan, plugins, folder: Path, executor: Scripted, retry_failed: bool = False):
    events: list[tuple[str, str]] = []
    setup = PoolSetup(plugin_flags=(), data_root=folder, device="cpu")
    with ResultsStore(folder) as store:
        summary = run_sweep(plan, plugins, store, CPU, retry_failed,
                            lambda event, text: events.append((event, text)),
                            setup=setup, executor=executor)  # fmt: skip
    return summary, events


def _statuses(folder: Path) -> dict[str, str]:
    with ResultsStore(folder) as store:
        return store.statuses()


def test_runs_recorded_are_skipped_and_failed_ones_run_again_when_retried(plan, plugins, tmp_path):
    ids = [spec.run_id for spec in plan.runs]
    summary, events = _sweep(plan, plugins, tmp_path, Scripted(3))
    assert (summary.done, len(summary.failed), summary.skipped) == (0, 3, 0)
    assert _statuses(tmp_path) == dict.fromkeys(ids, "failed")
    assert [e for e, _ in events] == ["claimed"] * 3 + ["start"] + ["failed"] * 3

    again = Scripted(3)
    summary, events = _sweep(plan, plugins, tmp_path, again)
    assert (summary.skipped, summary.failed_before, again.given) == (3, 3, [])
    assert not summary.ok and [e for e, _ in events] == ["skipped"] * 3 + ["start"]

    retried = Scripted(3)
    summary, _ = _sweep(plan, plugins, tmp_path, retried, retry_failed=True)
    assert (summary.skipped, sorted(retried.given)) == (0, sorted(ids))


def test_an_executor_refusing_before_any_result_gives_every_claim_back(plan, plugins, tmp_path):
    with pytest.raises(UsageError, match="the cluster refused"):
        _sweep(plan, plugins, tmp_path, Scripted(0, UsageError("the cluster refused")))
    assert _statuses(tmp_path) == {}


def test_an_executor_refusing_after_a_result_leaves_the_rest_to_resume(plan, plugins, tmp_path):
    executor = Scripted(1, UsageError("the cluster refused"))
    with pytest.raises(UsageError):
        _sweep(plan, plugins, tmp_path, executor)
    first, *rest = executor.given
    assert _statuses(tmp_path) == {first: "failed", **dict.fromkeys(rest, "interrupted")}


def test_a_lost_executor_leaves_its_runs_interrupted_and_says_why(plan, plugins, tmp_path):
    executor = Scripted(1, ExecutorLost("a job died"))
    summary, _ = _sweep(plan, plugins, tmp_path, executor)
    assert (summary.interrupted, summary.lost, summary.ok) == (2, "a job died", False)
    first, *rest = executor.given
    assert _statuses(tmp_path) == {first: "failed", **dict.fromkeys(rest, "interrupted")}


def test_a_run_another_live_sweep_holds_is_not_claimed(plan, plugins, tmp_path):
    held = plan.runs[1]
    with ResultsStore(tmp_path) as store:
        assert store.start(held, "bc", "maze:10x10", "cpu", {})
        # As if the claim were another live process's (this one's parent) on this host.
        store.db.execute("UPDATE runs SET host = ?, pid = ? WHERE run_id = ?",
                         (socket.gethostname(), os.getppid(), held.run_id))  # fmt: skip
        store.db.commit()
        events: list[tuple[str, str]] = []
        sweep = SweepExecution(plan, plugins, store, CPU, False, lambda *e: events.append(e))
        pending = sweep.skip_recorded()
        assert pending == [0, 1, 2]
        assert sweep.claim(pending) == [0, 2]
        assert sweep.summary.elsewhere == 1
        assert events[1] == ("skipped", sweep.describe(1) + " (done or running in another sweep)")
        assert store.status(held.run_id) == "running"
        assert {store.status(plan.runs[i].run_id) for i in (0, 2)} == {"running"}


def test_a_claimed_run_records_its_dataset_and_its_familys_paper_protocol(plan, plugins, tmp_path):
    _sweep(plan, plugins, tmp_path, Scripted(1))
    with ResultsStore(tmp_path) as store:
        versions = store.run(plan.runs[0].run_id).versions
    dataset = versions["dataset"]
    assert dataset["path"].startswith("maze/10x10-") and "/" not in dataset["path"][5:]
    assert (dataset["source"], dataset["plugin"]) == ("built", "ssilbench_maze")
    assert versions["protocol"] == {"default_steps": 1500, "paper": None}  # maze declares none
    assert versions["plugins"] and versions["ssilbench"]  # beside the versions, as before
