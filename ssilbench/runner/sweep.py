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
from ssilbench.planning.plan import SweepPlan, TaskInfo, open_datasets
from ssilbench.planning.values import display_label
from ssilbench.plugins import Plugins
from ssilbench.runner.observer import SweepObserver
from ssilbench.runner.schedule import execution_units, leaders_first
from ssilbench.runner.telemetry import (
    announce,
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
    setup_provenance,
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
        # Options that follow the seed are left out: a setup's runs share one label.
        display_label(spec.env, spec.shared_options(), type(task.options), _run_defaults(task)),
    )


def _run_defaults(task: TaskInfo) -> dict[str, Any]:
    """The option values the task's family gives runs that leave them unset: a label shows
    what differs from them."""
    return {} if task.environment is None else task.environment.run_defaults(task.options)


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
            tasks = [plan.task_of(spec) for spec in specs]
            method = plan.method_of(specs[0])
            outcomes = execute_many(specs, method, tasks, plugins, device, storage)
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
    announce([spec.run_id for spec in unit], "preparing data")
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
    An ``on_progress`` that is a :class:`~ssilbench.runner.observer.SweepObserver` also
    follows each run while it trains (from this process and from a pool's workers) and
    hands each recorded run, curves included, to its loggers."""
    sweep = SweepExecution(plan, plugins, store, device, retry_failed, on_progress)
    pending = sweep.skip_recorded()
    units = execution_units(plan, pending, workers, stack, executor is not None)
    # A stage several runs share is trained by the first unit that needs it; the others
    # go after, so that they find it trained rather than hold a worker while they wait.
    units = leaders_first(plan, units)
    pooled = workers > 1 and executor is None
    if executor is not None or (pooled and len(units) > 1):
        if setup is None:
            raise ValueError("running elsewhere needs the PoolSetup")
        sweep.run_elsewhere(units, setup, workers, executor)
    else:
        sweep.run_here(units, storage)
    return sweep.summary


class SweepExecution:
    """One execution of a plan into a store, step by step: skip the runs recorded already,
    claim each unit's runs, run them here or elsewhere (a pool, an executor), record each
    result. This process alone writes the store; :attr:`summary` counts what happened.

    A run is claimed (``store.start``) just before it is run, and every claimed run ends
    recorded (done or failed), interrupted (for the next sweep to resume) or, when an
    executor refuses before any run finished, released (as if never claimed)."""

    def __init__(
        self,
        plan: SweepPlan,
        plugins: Plugins,
        store: ResultsStore,
        device: torch.device,
        retry_failed: bool = False,
        on_progress: Callable[[str, str], None] | None = None,
    ) -> None:
        self.plan = plan
        self.plugins = plugins
        self.store = store
        self.device = device
        self.retry_failed = retry_failed
        self.observer = on_progress if isinstance(on_progress, SweepObserver) else None
        self.notify: Callable[[str, str], None] = on_progress or (lambda event, text: None)
        self.summary = SweepSummary(total=len(plan.runs))
        self.labels: dict[int, tuple[str, str]] = {}  # run index -> (method, env) labels
        self.index_of = {spec.run_id: index for index, spec in enumerate(plan.runs)}
        self.provenance = versions(plugins)
        self.task_provenance: dict[int, dict] = {}  # per task: what each run records
        self.device_name = describe_device(device)

    def describe(self, index: int) -> str:
        spec = self.plan.runs[index]
        method_label, env_label = self.labels[index]
        return f"{method_label} on {env_label}, N_L={spec.budget}, seed {spec.seed}"

    def skip_recorded(self) -> list[int]:
        """The indices of the runs to execute: runs left 'running' by dead processes of this
        host count as interrupted (to resume); runs done, and failed ones unless retried,
        are skipped."""
        self.store.mark_stale_interrupted()
        statuses = self.store.statuses()
        pending: list[int] = []
        for index, spec in enumerate(self.plan.runs):
            self.labels[index] = run_label(self.plan, spec)
            status = statuses.get(spec.run_id)
            if status == "done" or (status == "failed" and not self.retry_failed):
                self.summary.skipped += 1
                self.summary.failed_before += status == "failed"
                self.notify("skipped", self.describe(index))
            else:
                pending.append(index)
        return pending

    def claim(self, unit: list[int]) -> list[int]:
        """The runs of the unit this process may run; another live sweep may hold some."""
        mine = []
        for index in unit:
            spec = self.plan.runs[index]
            task = self.plan.task_of(spec)
            if id(task) not in self.task_provenance:  # thousands of runs share a few tasks
                self.task_provenance[id(task)] = {
                    **self.provenance,
                    **setup_provenance(task, self.plan.data_root),
                }
            provenance = self.task_provenance[id(task)]
            if self.store.start(spec, *self.labels[index], self.device_name, provenance,
                                self.retry_failed):  # fmt: skip
                mine.append(index)
                if self.observer is not None:
                    self.observer.run_started(spec.run_id, self.describe(index), spec.steps,
                                              spec)  # fmt: skip
                self.notify("claimed", self.describe(index))
            else:
                self.summary.elsewhere += 1
                self.notify("skipped", self.describe(index) + " (done or running in another sweep)")
        return mine

    def record(self, result: WorkerResult) -> int:
        """Write one run's result into the store; the run's index."""
        index = self.index_of[result.run_id]
        if result.outcome is not None:
            self.store.finish(result.run_id, result.outcome, result.wall)
            self.summary.done += 1
        else:
            assert result.failure is not None
            self.store.fail(result.run_id, result.failure.traceback, result.wall)
            self.summary.failed.append((self.describe(index), result.failure.summary))
        if self.observer is not None:
            done = result.outcome is not None
            self.observer.run_ended(result.run_id, self.store.run(result.run_id, curves=True)
                                    if done else None)  # fmt: skip
        self.notify(result.status, self.describe(index))
        return index

    def run_here(self, units: list[list[int]], storage: RunStorage | None = None) -> None:
        """Claim and run each unit in this process, one after the other."""
        for unit in units:
            mine = self.claim(unit)
            if not mine:
                continue
            more = f" (+{len(mine) - 1} stacked)" if len(mine) > 1 else ""
            self.notify("start", self.describe(mine[0]) + more)
            with events_to(self.observer.run_event if self.observer is not None else None):
                announce([self.plan.runs[i].run_id for i in mine], "preparing data")
                outcomes = _execute(self.plan, self.plugins, [self.plan.runs[i] for i in mine],
                                    self.device, storage)  # fmt: skip
            for result in outcomes:
                self.record(result)

    def run_elsewhere(
        self,
        units: list[list[int]],
        setup: PoolSetup,
        workers: int = 1,
        executor: Executor | None = None,
    ) -> None:
        """Run the units on ``executor``, or in a pool of ``workers`` processes, recording
        each result as it comes back."""
        claimed: list[list[int]] = []
        if executor is not None:
            shipped = list(self._claimed_units(units, claimed))  # queued at once: claimed now
            units = claimed
        where = executor.describe() if executor is not None else f"{workers} workers"
        stacked = f" in {len(units)} stacked units" if any(len(u) > 1 for u in units) else ""
        self.notify("start", f"{sum(map(len, units))} runs{stacked} on {where}")
        # A pool claims a unit when a worker is free for it: what no worker has started
        # stays unclaimed, for another sweep on the store to take, or `not started`.
        if executor is not None:
            results = executor.run(shipped, setup)
        else:
            results = _in_pool(self._claimed_units(units, claimed), setup, workers, self.observer)
        self._record_results(results, claimed)

    def _claimed_units(self, units: list[list[int]], claimed: list[list[int]]) -> Iterator[Unit]:
        """The specs of each unit's runs this process claims (kept in ``claimed``), claimed
        as the unit is taken."""
        for unit in units:
            if mine := self.claim(unit):
                claimed.append(mine)
                yield [self.plan.runs[i] for i in mine]

    def _record_results(self, results: Iterable[WorkerResult], claimed: list[list[int]]) -> None:
        """Record each result; when the results stop coming, settle the claimed runs left."""
        finished: set[int] = set()
        try:
            for result in results:
                finished.add(self.record(result))
        except SsilbenchError:
            # Refused (a cluster that cannot be reached, ...): claims are given back when no
            # run finished, else what did not finish is left for the next sweep to resume.
            left = self._unfinished(claimed, finished)
            if finished:
                self.store.mark_interrupted(left)
            else:
                self.store.release(left)
            raise
        except ExecutorLost as exc:
            # A worker or job died (killed, out of memory, pre-empted for good): its runs and
            # the claimed ones not started are marked interrupted; the next sweep resumes them.
            left = self._unfinished(claimed, finished)
            self.summary.interrupted = self.store.mark_interrupted(left)
            self.summary.lost = str(exc)

    def _unfinished(self, claimed: list[list[int]], finished: set[int]) -> list[str]:
        return [self.plan.runs[i].run_id for unit in claimed for i in unit if i not in finished]
