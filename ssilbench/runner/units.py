"""What travels between a sweep and the processes that run its units, wherever they are.

A *unit* is one run, or runs stacked into one computation, given by their prepared
:class:`~ssilbench.runs.spec.RunSpec` s: a worker needs nothing else (and the
:class:`PoolSetup`) to run them. Each run comes back as one :class:`WorkerResult`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ssilbench.runner.worker import RunStorage
from ssilbench.runs.records import RunOutcome
from ssilbench.runs.spec import RunSpec

Unit = list[RunSpec]


@dataclass(frozen=True)
class PoolSetup:
    """What a worker process needs besides the specs: which plugins to load, where the
    datasets are, which device to use, where stages and checkpoints go."""

    plugin_flags: tuple[str, ...]
    data_root: Path
    device: str
    storage: RunStorage = field(default_factory=RunStorage)
    threads: int = 1


@dataclass(frozen=True)
class RunFailure:
    """Why a run failed: the traceback for the store, one line for the sweep's summary."""

    traceback: str
    summary: str


@dataclass(frozen=True)
class WorkerResult:
    """One run's result: an outcome or a failure, and its wall time (a stacked run's share
    of its unit's)."""

    run_id: str
    wall: float
    outcome: RunOutcome | None = None
    failure: RunFailure | None = None

    def __post_init__(self) -> None:
        if (self.outcome is None) == (self.failure is None):
            raise ValueError("a WorkerResult holds an outcome or a failure")

    @property
    def status(self) -> str:
        return "done" if self.outcome is not None else "failed"


class ExecutorLost(RuntimeError):
    """An executor can no longer deliver the results of the units it was given."""


class Executor(Protocol):
    """Runs a sweep's units somewhere else (a Ray cluster, SLURM) and yields each run's
    result back to the sweep, which alone writes the results store. Raises
    :class:`ExecutorLost` when the results of some units can no longer come."""

    def describe(self) -> str:
        """Where the units run, for the sweep's progress line."""
        ...

    def run(self, units: list[Unit], setup: PoolSetup) -> Iterator[WorkerResult]:
        """Run every unit (``ssilbench.runner.sweep.work_unit`` in the remote process)."""
        ...
