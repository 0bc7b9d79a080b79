"""Where the units of a sweep run: this machine (``ssilbench.runner.sweep``), a Ray
cluster, or SLURM through submitit.

Every executor (``ssilbench.runner.units.Executor``) gets the same units (the prepared
specs of one run, or of runs stacked into one computation) and the same ``PoolSetup``, which
are all the remote process needs; it yields each run's ``WorkerResult`` back to the sweep,
which alone writes the results store.
A unit whose process dies is reported by raising ``ExecutorLost``; the sweep then marks the
unfinished runs interrupted, and a later sweep resumes them (from their checkpoints with
``--checkpoint-every``).
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ssilbench.errors import UsageError
from ssilbench.runner.sweep import work_unit
from ssilbench.runner.units import Executor, ExecutorLost, PoolSetup, Unit, WorkerResult

if TYPE_CHECKING:
    from ssilbench.planning.options import ExecutorSettings

INSTALL = "install it with: pip install 'ssilbench[cluster]'"


@dataclass
class RayExecutor:
    """Each unit a Ray task with its resource request."""

    address: str | None = None  # None: start a local Ray for this sweep
    cpus_per_run: float = 1.0
    gpus_per_run: float = 0.0

    def __post_init__(self) -> None:
        # Every prerequisite is checked here, when the executor is made: before the sweep
        # claims any run, so that a refusal leaves the store as it was.
        _import("ray")
        _check_reachable(self.address)

    def describe(self) -> str:
        return f"Ray ({self.address or 'local'})"

    def run(self, units: list[Unit], setup: PoolSetup) -> Iterator[WorkerResult]:
        ray = _import("ray")
        started_here = not ray.is_initialized()
        if started_here:
            try:
                ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                         configure_logging=False)  # fmt: skip
            except (ConnectionError, ValueError, RuntimeError) as exc:
                raise UsageError(
                    f"Cannot reach a Ray cluster at {self.address!r}: {exc}. Start one with "
                    "'ray start --head' and pass its address with --ray-address, or leave "
                    "--ray-address out to start a local one."
                ) from None
        task = ray.remote(num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run,
                          max_retries=0)(work_unit)  # fmt: skip
        try:
            pending = {task.remote(setup, unit): unit for unit in units}
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    pending.pop(ref)
                    try:
                        yield from ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        raise ExecutorLost(f"a Ray task died ({type(exc).__name__})") from None
        finally:
            if started_here:
                ray.shutdown()


@dataclass
class SlurmExecutor:
    """Units as one SLURM job array through submitit, requeued when pre-empted."""

    folder: Path
    partition: str | None = None
    time_min: int = 60
    gpus_per_run: int = 0
    cpus_per_run: int = 1
    parallelism: int = 64
    cluster: str | None = None  # None: SLURM; "local" or "debug": submitit's test executors

    def __post_init__(self) -> None:
        # Checked before the sweep claims any run (see RayExecutor).
        _import("submitit")
        _check_sbatch(self.cluster)

    def describe(self) -> str:
        where = self.cluster or f"SLURM{f' ({self.partition})' if self.partition else ''}"
        return f"{where}, at most {self.parallelism} at once"

    def run(self, units: list[Unit], setup: PoolSetup) -> Iterator[WorkerResult]:
        submitit = _import("submitit")
        executor = submitit.AutoExecutor(folder=self.folder, cluster=self.cluster)
        params = {"timeout_min": self.time_min, "cpus_per_task": self.cpus_per_run}
        if self.cluster is None:
            params.update(slurm_array_parallelism=self.parallelism,
                          slurm_additional_parameters={"requeue": True})  # fmt: skip
            if self.partition:
                params["slurm_partition"] = self.partition
            if self.gpus_per_run:
                params["gpus_per_node"] = self.gpus_per_run
        executor.update_parameters(**params)
        jobs = executor.map_array(_Job(), [setup] * len(units), units)
        for job in jobs:
            try:
                yield from job.result()
            except Exception as exc:  # submitit raises the job's failure or its loss
                raise ExecutorLost(f"SLURM job {job.job_id} ended without results: "
                                   f"{str(exc).strip().splitlines()[-1:]}") from None  # fmt: skip


class _Job:
    """The job function; submitit requeues it (same arguments) when the job is pre-empted
    or times out, and the run resumes from its checkpoints."""

    def __call__(self, setup: PoolSetup, unit: Unit) -> list[WorkerResult]:
        return work_unit(setup, unit)

    def checkpoint(self, setup: PoolSetup, unit: Unit):
        import submitit

        return submitit.helpers.DelayedSubmission(self, setup, unit)


def _check_sbatch(cluster: str | None) -> None:
    if cluster is None and shutil.which("sbatch") is None:
        raise UsageError(
            "--executor slurm: no SLURM on this machine (sbatch not found). Run from a "
            "SLURM login node, or try the sweep with --slurm-cluster local."
        )


def _check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """Fail fast on a HOST:PORT nobody answers on (Ray itself would retry for minutes)."""
    if not address or address == "auto" or "://" in address or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
    raise UsageError(
        f"Cannot reach a Ray cluster at {address!r}: {reason}. Start one with 'ray start "
        "--head' and pass its address with --ray-address, or leave --ray-address out to "
        "start a local one."
    )


def _import(name: str):
    try:
        module = __import__(name)
    except ImportError:
        module = None
    if module is None:  # an import that fails, or sys.modules[name] = None
        raise UsageError(f"--executor needs the package '{name}': {INSTALL}.")
    return module


def make_executor(settings: ExecutorSettings, results_dir: Path) -> Executor | None:
    """The executor ``settings`` ask for (None: this machine's own pool). SLURM keeps its job
    files in ``results_dir/slurm``. The settings are checked when a RunOptions is made."""
    if settings.kind == "ray":
        cpus, gpus = settings.cpus_per_run, settings.gpus_per_run
        return RayExecutor(settings.ray_address, cpus if cpus is not None else 1.0, gpus or 0.0)
    if settings.kind == "slurm":
        return SlurmExecutor(
            results_dir / "slurm",
            settings.slurm_partition,
            settings.slurm_time or 60,
            int(settings.gpus_per_run or 0),
            max(1, int(settings.cpus_per_run or 1)),
            settings.slurm_parallelism or 64,
            settings.slurm_cluster,
        )
    return None
