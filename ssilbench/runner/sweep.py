"""Run a planned sweep locally: skip finished runs, record each outcome, keep going on failure.

With ``workers > 1`` runs execute in a pool of spawned processes (one torch thread each);
only this process writes to the results store, so a run is recorded exactly once.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch

from ssilbench.errors import SsilbenchError
from ssilbench.planning.plan import SweepPlan, open_datasets
from ssilbench.planning.values import display_label
from ssilbench.plugins import Plugins
from ssilbench.runner.schedule import execution_units, leaders_first
from ssilbench.runner.telemetry import (
    SweepObserver,
    drained,
    events_to,
    queue_sink,
    set_sink,
)
from ssilbench.runner.units import (
    Executor,
    ExecutorLost,
    PoolSetup,
    RunFailure,
    Unit,
    WorkerResult,
)
from ssilbench.runner.worker import (
    RunStorage,
    describe_device,
    execute,
    execute_many,
    versions,
)
from ssilbench.runs.spec import RunSpec
from ssilbench.runs.store import ResultsStore


@dataclass
class SweepSummary:
    total: int
    skipped: int = 0
    elsewhere: int = 0  # claimed by another live sweep on the same store
    interrupted: int = 0  # left unfinished by a worker process that died
    lost: str = ""  # what happened to the executor that left them
    done: int = 0
    failed_before: int = 0  # failed in an earlier sweep and not retried
    failed: list[tuple[str, str]] = field(default_factory=list)  # (run label, last error line)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.failed_before and not self.interrupted


def run_label(plan: SweepPlan, spec: RunSpec) -> tuple[str, str]:
    """(method label, env label) with non-default config/options spelled out."""
    method = plan.method_of(spec)
    task = plan.task_of(spec)
    return (
        display_label(spec.method, spec.config, method.cls.Config),
        display_label(spec.env, spec.options, type(task.options)),
    )


def _execute(
    plan: SweepPlan,
    plugins: Plugins,
    specs: Unit,
    device: torch.device,
    storage: RunStorage | None = None,
) -> list[WorkerResult]:
    """Run one unit, one result per run. A stacked run's wall time is its share of the
    unit's; a resumed run's adds its earlier attempts' (``RunOutcome.earlier_seconds``)."""
    began = time.perf_counter()
    try:
        if len(specs) == 1:
            outcomes = [execute(specs[0], plan.method_of(specs[0]), plan.task_of(specs[0]),
                                plugins, device, storage)]  # fmt: skip
        else:
            outcomes = execute_many(
                specs, plan.method_of(specs[0]), plan.task_of(specs[0]), plugins, device, storage
            )
    except Exception as exc:
        failure = RunFailure(traceback.format_exc(), f"{type(exc).__name__}: {exc}")
        wall = (time.perf_counter() - began) / len(specs)
        return [WorkerResult(s.run_id, wall, failure=failure) for s in specs]
    wall = (time.perf_counter() - began) / len(specs)
    return [WorkerResult(s.run_id, wall + o.earlier_seconds, outcome=o)
            for s, o in zip(specs, outcomes, strict=True)]  # fmt: skip


_WORKER: dict[str, Any] = {}


def worker_device(device: str, slot: int | None, visible: int) -> str:
    """One GPU per pool worker when several are visible: worker k takes cuda:(k mod n)."""
    if slot is None or visible < 2 or device not in ("cuda", "cuda:0"):
        return device
    return f"cuda:{slot % visible}"


def _die_with(parent: int) -> None:
    """End this process when ``parent`` (the sweep's process) ends, however it ends: a pool
    worker left behind would go on training runs that nobody can record. Linux only."""
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the sweep ended before the request was made
        os._exit(1)


def _init_pool_worker(parent: int, setup: PoolSetup, slots: Any, events: Any) -> None:
    _die_with(parent)
    _init_worker(setup, slots, events)


def _init_worker(setup: PoolSetup, slots: Any = None, events: Any = None) -> None:
    """Load the plugins in this process (once per setup); ``events``: the queue the runs'
    progress events go to (a pool of the sweep's process)."""
    from ssilbench.plugins import load_plugins

    if events is not None:
        set_sink(queue_sink(events))
    if _WORKER.get("setup") == setup:
        return
    slot = None
    if slots is not None:
        with slots.get_lock():
            slot, slots.value = slots.value, slots.value + 1
    visible = torch.cuda.device_count() if setup.device.startswith("cuda") else 0
    device = worker_device(setup.device, slot, visible)
    torch.set_num_threads(setup.threads)
    _WORKER.update(plugins=load_plugins(setup.plugin_flags), plan=SweepPlan(runs=[]),
                   device=torch.device(device), storage=setup.storage, setup=setup)  # fmt: skip


def _work(unit: Unit) -> list[WorkerResult]:
    w = _WORKER
    plan: SweepPlan = w["plan"]
    try:
        # Tasks, methods and opened datasets are kept for the process's later units.
        for spec in unit:
            if spec.run_id not in plan.stages:
                plan.add(w["plugins"], spec)
        open_datasets(SweepPlan(unit, plan.tasks, plan.methods, plan.stages), w["setup"].data_root)
    except Exception as exc:  # the unit cannot start here; its runs fail with the reason
        failure = RunFailure(traceback.format_exc(), f"{type(exc).__name__}: {exc}")
        return [WorkerResult(s.run_id, 0.0, failure=failure) for s in unit]
    return _execute(plan, w["plugins"], unit, w["device"], w["storage"])


def work_unit(setup: PoolSetup, unit: Unit) -> list[WorkerResult]:
    """Execute a unit of the sweep in whatever process an executor runs it in: the specs
    and the setup are all it needs."""
    _init_worker(setup)
    return _work(unit)


def _in_pool(
    units: Iterable[Unit], setup: PoolSetup, workers: int, observer: SweepObserver | None = None
) -> Iterator[WorkerResult]:
    """The results of ``units`` trained by ``workers`` processes. A unit is taken from
    ``units`` only when a worker is free for it, so that a lazy ``units`` (one that claims
    its runs as it yields them) leaves the runs no worker has started to other sweeps."""
    context = multiprocessing.get_context("spawn")
    # The runs' progress events come back on a queue this process drains (bounded: a
    # worker drops events rather than wait when nobody keeps up).
    events = context.Queue(10_000) if observer is not None else None
    watching = drained(events, observer.run_event) if observer is not None else nullcontext()
    try:
        slots = context.Value("i", 0)
        with (
            watching,
            ProcessPoolExecutor(
                workers,
                mp_context=context,
                initializer=_init_pool_worker,
                initargs=(os.getpid(), setup, slots, events),
            ) as pool,
        ):
            queue = iter(units)
            todo: set = set()
            while True:
                while len(todo) < workers and (unit := next(queue, None)) is not None:
                    todo.add(pool.submit(_work, unit))
                if not todo:
                    break
                finished, todo = wait(todo, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield from future.result()
    except BrokenProcessPool:
        raise ExecutorLost("a worker process died") from None


def run_sweep(
    plan: SweepPlan,
    plugins: Plugins,
    store: ResultsStore,
    device: torch.device,
    retry_failed: bool = False,
    on_progress: Callable[[str, str], None] | None = None,
    workers: int = 1,
    setup: PoolSetup | None = None,
    stack: bool | None = None,
    storage: RunStorage | None = None,
    executor: Executor | None = None,
) -> SweepSummary:
    """Execute every run of the plan not already done; ``on_progress(event, label)`` reports.
    ``storage`` says where trained stages are reused from and checkpoints go (a stacked
    unit checkpoints each of its runs). ``stack``: train runs together where the method can;
    None stacks in this process or on an executor, and in a pool of ``workers`` trains runs
    one at a time. Stacked in a pool, each label budget is a unit of its own.
    ``executor`` (``ssilbench.runner.executors``) sends units elsewhere (Ray, SLURM); the
    results come back here and this process alone writes the store.
    An ``on_progress`` that is a :class:`~ssilbench.runner.telemetry.SweepObserver` also
    follows each run while it trains (from this process and from a pool's workers) and
    hands each recorded run, curves included, to its loggers."""
    observer = on_progress if isinstance(on_progress, SweepObserver) else None
    store.mark_stale_interrupted()
    statuses = store.statuses()
    provenance = versions(plugins)
    device_name = describe_device(device)
    summary = SweepSummary(total=len(plan.runs))
    notify = on_progress or (lambda event, text: None)

    labels = {}
    pending: list[int] = []
    for index, spec in enumerate(plan.runs):
        method_label, env_label = run_label(plan, spec)
        labels[index] = (method_label, env_label)
        text = f"{method_label} on {env_label}, N_L={spec.budget}, seed {spec.seed}"
        status = statuses.get(spec.run_id)
        if status == "done" or (status == "failed" and not retry_failed):
            summary.skipped += 1
            summary.failed_before += status == "failed"
            notify("skipped", text)
        else:
            pending.append(index)

    def describe(index: int) -> str:
        spec = plan.runs[index]
        return f"{labels[index][0]} on {labels[index][1]}, N_L={spec.budget}, seed {spec.seed}"

    index_of = {spec.run_id: index for index, spec in enumerate(plan.runs)}

    def record(result: WorkerResult) -> int:
        index = index_of[result.run_id]
        if result.outcome is not None:
            store.finish(result.run_id, result.outcome, result.wall)
            summary.done += 1
        else:
            assert result.failure is not None
            store.fail(result.run_id, result.failure.traceback, result.wall)
            summary.failed.append((describe(index), result.failure.summary))
        if observer is not None:
            done = result.outcome is not None
            observer.run_ended(result.run_id, store.run(result.run_id, curves=True) if done
                               else None)  # fmt: skip
        notify(result.status, describe(index))
        return index

    pooled = workers > 1 and executor is None
    units = execution_units(plan, pending, workers, stack, executor is not None)
    # A stage several runs share is trained by the first unit that needs it; the others
    # go after, so that they find it trained rather than hold a worker while they wait.
    units = leaders_first(plan, units)

    def claim(unit: list[int]) -> list[int]:
        """The runs of the unit this process may run; another live sweep may hold some."""
        mine = []
        for index in unit:
            spec = plan.runs[index]
            if store.start(spec, *labels[index], device_name, provenance, retry_failed):
                mine.append(index)
                if observer is not None:
                    observer.run_started(spec.run_id, describe(index), spec.steps)
                notify("claimed", describe(index))
            else:
                summary.elsewhere += 1
                notify("skipped", describe(index) + " (done or running in another sweep)")
        return mine

    remote = executor is not None or (pooled and len(units) > 1)
    if remote:
        if setup is None:
            raise ValueError("running elsewhere needs the PoolSetup")
        claimed: list[list[int]] = []

        def claimed_units(units: list[list[int]]) -> Iterator[Unit]:
            for unit in units:
                if mine := claim(unit):
                    claimed.append(mine)
                    yield [plan.runs[i] for i in mine]

        if executor is not None:
            shipped = list(claimed_units(units))  # queued on the cluster at once: claimed now
            units = claimed
        where = executor.describe() if executor is not None else f"{workers} workers"
        stacked = f" in {len(units)} stacked units" if any(len(u) > 1 for u in units) else ""
        notify("start", f"{sum(map(len, units))} runs{stacked} on {where}")
        # A pool claims a unit when a worker is free for it: what no worker has started
        # stays unclaimed, for another sweep on the store to take, or `not started`.
        results = (executor.run(shipped, setup) if executor is not None
                   else _in_pool(claimed_units(units), setup, workers, observer))  # fmt: skip
        finished: set[int] = set()
        try:
            for result in results:
                finished.add(record(result))
        except SsilbenchError:
            # Refused (a cluster that cannot be reached, ...): claims are given back when no
            # run finished, else what did not finish is left for the next sweep to resume.
            left = [plan.runs[i].run_id for u in claimed for i in u if i not in finished]
            if finished:
                store.mark_interrupted(left)
            else:
                store.release(left)
            raise
        except ExecutorLost as exc:
            # A worker or job died (killed, out of memory, pre-empted for good): its runs and
            # the claimed ones not started are marked interrupted; the next sweep resumes them.
            left = [plan.runs[i].run_id for u in claimed for i in u if i not in finished]
            summary.interrupted = store.mark_interrupted(left)
            summary.lost = str(exc)
        return summary

    for unit in units:
        unit = claim(unit)
        if not unit:
            continue
        notify(
            "start", describe(unit[0]) + (f" (+{len(unit) - 1} stacked)" if len(unit) > 1 else "")
        )
        with events_to(observer.run_event if observer is not None else None):
            outcomes = _execute(plan, plugins, [plan.runs[i] for i in unit], device, storage)
        for result in outcomes:
            record(result)
    return summary
