"""Run a planned sweep locally: skip finished runs, record each outcome, keep going on failure.

With ``workers > 1`` runs execute in a pool of spawned processes (one torch thread each);
only this process writes to the results store, so a run is recorded exactly once.
"""

from __future__ import annotations

import multiprocessing
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ssilbench.plugins import Plugins
from ssilbench.runner.plan import Plan, label
from ssilbench.runner.spec import RunSpec, Sweep
from ssilbench.runner.store import ResultsStore, RunOutcome
from ssilbench.runner.worker import describe_device, execute, versions


@dataclass
class SweepReport:
    total: int
    skipped: int = 0
    done: int = 0
    failed_before: int = 0  # failed in an earlier sweep and not retried
    failed: list[tuple[str, str]] = field(default_factory=list)  # (run label, last error line)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.failed_before


def run_label(plan: Plan, spec: RunSpec) -> tuple[str, str]:
    """(method label, env label) with non-default config/options spelled out."""
    method = plan.methods[spec.method]
    task = plan.tasks[plan.task_key(spec)]
    return (
        label(spec.method, spec.config, method.cls.Config),
        label(spec.env, spec.options, type(task.options)),
    )


@dataclass(frozen=True)
class PoolSetup:
    """What a pool worker needs to rebuild the same plan in its own process."""

    plugin_flags: tuple[str, ...]
    sweep: Sweep
    data_root: Path
    device: str


def _execute(plan: Plan, plugins: Plugins, spec: RunSpec, device: torch.device):
    began = time.perf_counter()
    try:
        outcome = execute(
            spec, plan.methods[spec.method], plan.tasks[plan.task_key(spec)], plugins, device
        )
    except Exception as exc:
        return "failed", (traceback.format_exc(), f"{type(exc).__name__}: {exc}"), began
    return "done", outcome, began


_WORKER: dict[str, Any] = {}


def _init_worker(setup: PoolSetup) -> None:
    from ssilbench.plugins import load_plugins
    from ssilbench.runner.plan import build_plan

    torch.set_num_threads(1)
    plugins = load_plugins(setup.plugin_flags)
    _WORKER.update(
        plugins=plugins,
        plan=build_plan(plugins, setup.sweep, setup.data_root),
        device=torch.device(setup.device),
    )


def _work(index: int) -> tuple[str, Any, float]:
    status, payload, began = _execute(
        _WORKER["plan"], _WORKER["plugins"], _WORKER["plan"].runs[index], _WORKER["device"]
    )
    return status, payload, time.perf_counter() - began


def _in_pool(pending: list[int], setup: PoolSetup, workers: int) -> Iterator[tuple]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_worker, initargs=(setup,)
    ) as pool:
        todo = {pool.submit(_work, index): index for index in pending}
        while todo:
            finished, _ = wait(todo, return_when=FIRST_COMPLETED)
            for future in finished:
                index = todo.pop(future)
                status, payload, wall = future.result()
                yield index, status, payload, wall


def run_sweep(
    plan: Plan,
    plugins: Plugins,
    store: ResultsStore,
    device: torch.device,
    retry_failed: bool = False,
    on_progress: Callable[[str, str], None] | None = None,
    workers: int = 1,
    setup: PoolSetup | None = None,
) -> SweepReport:
    """Execute every run of the plan not already done; ``on_progress(event, label)`` reports."""
    store.mark_stale_interrupted()
    statuses = store.statuses()
    provenance = versions(plugins)
    device_name = describe_device(device)
    report = SweepReport(total=len(plan.runs))
    notify = on_progress or (lambda event, text: None)

    labels = {}
    pending: list[int] = []
    for index, spec in enumerate(plan.runs):
        method_label, env_label = run_label(plan, spec)
        labels[index] = (method_label, env_label)
        text = f"{method_label} on {env_label}, N_L={spec.budget}, seed {spec.seed}"
        status = statuses.get(spec.run_id)
        if status == "done" or (status == "failed" and not retry_failed):
            report.skipped += 1
            report.failed_before += status == "failed"
            notify("skipped", text)
        else:
            pending.append(index)

    def describe(index: int) -> str:
        spec = plan.runs[index]
        return f"{labels[index][0]} on {labels[index][1]}, N_L={spec.budget}, seed {spec.seed}"

    def record(index: int, status: str, payload: Any, wall: float) -> None:
        spec = plan.runs[index]
        if status == "done":
            assert isinstance(payload, RunOutcome)
            store.finish(spec.run_id, payload, wall)
            report.done += 1
        else:
            store.fail(spec.run_id, payload[0], wall)
            report.failed.append((describe(index), payload[1]))
        notify(status, describe(index))

    if workers > 1 and len(pending) > 1:
        if setup is None:
            raise ValueError("a pool needs the PoolSetup to rebuild the plan in its workers")
        for index in pending:
            store.start(plan.runs[index], *labels[index], device_name, provenance)
        notify("start", f"{len(pending)} runs on {workers} workers")
        for index, status, payload, wall in _in_pool(pending, setup, workers):
            record(index, status, payload, wall)
        return report

    for index in pending:
        spec = plan.runs[index]
        notify("start", describe(index))
        store.start(spec, *labels[index], device_name, provenance)
        status, payload, began = _execute(plan, plugins, spec, device)
        record(index, status, payload, time.perf_counter() - began)
    return report
