"""The settings of one ``ssilbench run`` (or ``plan``), checked before anything is planned.

:class:`RunOptions` holds every setting as the command line gives it (comma-separated lists
stay text until :meth:`RunOptions.sweep` parses them), so that a library caller and the
command see the same checks and the same messages. The run settings themselves (what a
sweep gives its runs) are declared in :mod:`ssilbench.runs.settings`, with their flags and
bounds; this module adds the settings of the command (where and how the runs execute).
Flags that do not fit together, and any value out of its range (seeds in 0..2^63-1, step
counts and intervals in 1..10^9, finite numbers only), raise a
:class:`~ssilbench.errors.UsageError` when the object is made; the list flags are parsed and
a sweep file is read and checked then too, so that a mistake is reported before anything is
planned, claimed or written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ssilbench.data.split import parse_budgets
from ssilbench.errors import UsageError
from ssilbench.planning.values import comma_list, parse_assignments, parse_seeds
from ssilbench.runs.settings import MAX_STEPS, bounds, extra, flag, required, settings
from ssilbench.runs.spec import Sweep

EXECUTORS = ("local", "ray", "slurm")
THREAD_SETTINGS = ("auto", "torch")
"""``--threads`` besides a count: ``auto`` chooses from the sweep's networks and the cores
(``ssilbench.runner.launch.choose_threads``), ``torch`` leaves torch's own default."""


MAX_PROCESSES = 1024  # --workers and --threads: more is a typo, not a machine


def _whole(value: object, flag: str, high: int | None = None, what: str = "") -> None:
    """A UsageError unless ``value`` (None: not given) is a whole number in 1..high."""
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool):
        raise UsageError(f"{flag} must be a whole number, got {value!r}.")
    if value < 1:
        raise UsageError(f"{flag} must be a positive integer, got {value}.")
    if high is not None and value > high:
        raise UsageError(f"{flag} {value} is over the limit of {high:,} {what}; give at most "
                         f"{high:,}.")  # fmt: skip


def _finite(value: object, flag: str) -> None:
    """A UsageError unless ``value`` (None: not given) is a finite, non-negative number."""
    if value is None:
        return
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise UsageError(f"{flag} must be a number, got {value!r}.")
    if not math.isfinite(value) or value < 0:
        raise UsageError(f"{flag} must be a finite number >= 0, got {value}.")


@dataclass(frozen=True)
class ExecutorSettings:
    """``--executor`` and the flags that size its requests (None: not given)."""

    kind: str = "local"
    ray_address: str | None = None
    cpus_per_run: float | None = None
    gpus_per_run: float | None = None
    slurm_partition: str | None = None
    slurm_time: int | None = None
    slurm_parallelism: int | None = None
    slurm_cluster: str | None = None

    def validate(self, workers: int) -> None:
        """Raise a UsageError for flags of another executor, or ``workers`` off the local one."""
        if self.kind not in EXECUTORS:
            choices = ", ".join(EXECUTORS)
            raise UsageError(f"--executor must be one of {choices}, not {self.kind!r}.")
        _finite(self.cpus_per_run, "--cpus-per-run")
        _finite(self.gpus_per_run, "--gpus-per-run")
        _whole(self.slurm_time, "--slurm-time")
        _whole(self.slurm_parallelism, "--slurm-parallelism")
        ray_flags = {"--ray-address": self.ray_address}
        slurm_flags = {"--slurm-partition": self.slurm_partition, "--slurm-time": self.slurm_time,
                       "--slurm-parallelism": self.slurm_parallelism,
                       "--slurm-cluster": self.slurm_cluster}  # fmt: skip
        kind = self.kind
        stray = [
            f
            for f, v in {**ray_flags, **slurm_flags}.items()
            if v is not None
            and not (kind == "ray" and f in ray_flags or kind == "slurm" and f in slurm_flags)
        ]
        if kind == "local":
            stray += [f for f, v in (("--cpus-per-run", self.cpus_per_run),
                                     ("--gpus-per-run", self.gpus_per_run)) if v]  # fmt: skip
        if stray:
            owner = ("ray" if stray[0] in ray_flags else "slurm" if stray[0] in slurm_flags
                     else "ray or slurm")  # fmt: skip
            raise UsageError(
                f"{', '.join(stray)} only apply to --executor {owner}; drop "
                f"{'it' if len(stray) == 1 else 'them'} or choose that executor."
            )
        if kind != "local" and workers != 1:
            raise UsageError(f"--workers is for --executor local; with {kind}, size the run "
                             "requests with --cpus-per-run/--gpus-per-run instead.")  # fmt: skip
        gpus = self.gpus_per_run
        if kind == "slurm" and gpus is not None and gpus != int(gpus):
            raise UsageError(f"--gpus-per-run must be a whole number for SLURM, got {gpus:g}.")


@dataclass(frozen=True)
class RunOptions:
    """Every setting of ``ssilbench run``; ``results`` and ``data_root`` are expanded paths.

    A sweep comes from ``sweep_file`` (with ``quick`` and ``blocks``) or from ``settings``:
    the run settings (:mod:`ssilbench.runs.settings`, where each is declared once) by name,
    as the command line gives them (comma-separated text for the lists, KEY=VALUE tuples for
    config and options; None, or an empty tuple, for one not given). :meth:`of` takes them
    as keyword arguments, as the command's parameters are named. ``dry_run`` plans without
    claiming or training anything; ``save_timings`` keeps the step times a dry run measured
    (``ssilbench plan``), ``measure`` measures those neither kept nor measured in the
    shipped table (else the estimate scales them by counted FLOPs, or leaves them out), and
    ``remeasure`` measures again those it would otherwise take from the kept or shipped
    ones. ``threads`` is a count of torch threads per training process, ``"auto"`` (the
    default; None means it too) or ``"torch"`` (see :data:`THREAD_SETTINGS`).
    ``keep_policy`` keeps each finished run's final policy in ``RESULTS/policies``
    (``ssilbench.eval.kept``); it changes no run's id or result.
    """

    results: Path
    data_root: Path
    settings: Mapping[str, Any] = field(default_factory=dict)
    sweep_file: Path | None = None
    quick: bool = False
    blocks: str | None = None
    device: str = "auto"
    retry_failed: bool = False
    workers: int = 1
    threads: int | str | None = "auto"
    stack: bool | None = None  # None: stacked in one process, one run at a time in a pool
    cache: bool = True
    checkpoint_every: int | None = None
    keep_policy: bool = False  # each finished run's final policy in RESULTS/policies
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    dry_run: bool = False
    save_timings: bool = False
    measure: bool = False
    remeasure: bool = False
    quiet: bool = False

    @classmethod
    def of(cls, **flags: Any) -> RunOptions:
        """RunOptions from keyword arguments named as ``run``'s parameters: each run setting
        by its name (``methods="bc"``, ``steps=20``, ``rollouts=False``), the others as the
        fields of this class."""
        names = set(settings())
        return cls(settings={k: v for k, v in flags.items() if k in names},
                   **{k: v for k, v in flags.items() if k not in names})  # fmt: skip

    def __post_init__(self) -> None:
        # Paths as the command line gives them ('~' included) become the folders they name.
        object.__setattr__(self, "results", Path(self.results).expanduser())
        object.__setattr__(self, "data_root", Path(self.data_root).expanduser())
        unknown = sorted(set(self.settings) - set(settings()))
        if unknown:
            raise UsageError(f"Not run settings: {', '.join(unknown)} (the settings are "
                             f"{', '.join(settings())}).")  # fmt: skip
        if self.sweep_file is not None:
            object.__setattr__(self, "sweep_file", Path(self.sweep_file))
            self._check_sweep_file_flags()
        else:
            self._check_sweep_flags()
        self._check_numbers()
        self.executor.validate(self.workers)
        # Every value is read now, so that its mistakes surface before anything is planned.
        if self.sweep_file is not None:
            self._check_sweep_file()
        else:
            self.sweep()

    def given(self, name: str) -> bool:
        """Whether the run setting ``name`` was given (not None, not an empty list)."""
        value = self.settings.get(name)
        return value is not None and value != () and value != []

    def _check_sweep_file_flags(self) -> None:
        given = [flag(name) for name in settings() if self.given(name)]
        if given:
            raise UsageError(
                f"--sweep takes methods, environments and budgets from the file; drop "
                f"{', '.join(given)}."
            )

    def _check_sweep_flags(self) -> None:
        if self.quick or self.blocks is not None:
            raise UsageError(f"{'--quick' if self.quick else '--blocks'} needs --sweep FILE.")
        missing = [flag(name) for name in required() if not self.given(name)]
        if missing:
            wanted = ", ".join(flag(name) for name in required()[:-1])
            raise UsageError(f"Missing {', '.join(missing)}: give {wanted} and "
                             f"{flag(required()[-1])} (and --budgets where an environment "
                             "family declares no paper protocol), or --sweep FILE.")  # fmt: skip
        for name in settings():
            if extra(name)["kind"] == "count":
                _within(self.settings.get(name), name)
        steps, scale = self.settings.get("steps"), self.settings.get("steps_scale")
        if scale is not None:
            _check_scale(scale)
        if scale is not None and steps is not None:
            raise UsageError("Give --steps or --steps-scale, not both.")

    def _check_numbers(self) -> None:
        """The numeric settings of the command itself: whole numbers within their bounds."""
        _whole(self.checkpoint_every, "--checkpoint-every", MAX_STEPS, "steps")
        _whole(self.workers, "--workers", MAX_PROCESSES, "processes")
        if self.threads is None:  # a library caller's "not given": the default
            object.__setattr__(self, "threads", "auto")
        if isinstance(self.threads, str):
            if self.threads not in THREAD_SETTINGS:
                raise UsageError(f"--threads takes a whole number, 'auto' or 'torch', not "
                                 f"{self.threads!r}.")  # fmt: skip
        else:
            _whole(self.threads, "--threads", MAX_PROCESSES, "threads")

    def _check_sweep_file(self) -> None:
        """Read and check the sweep file, its --blocks and its [quick] section now, so that a
        mistake in it is reported before the results folder is made."""
        from ssilbench.planning.sweepfile import load_blocks

        load_blocks(Path(self.sweep_file or ""), self.blocks).blocks(self.quick)

    @property
    def datasets(self) -> str:
        """How planning treats datasets: a dry run only reads those already there."""
        return "read" if self.dry_run else "prepare"

    def sweep(self) -> Sweep:
        """The sweep the run settings describe (not for a sweep file); a malformed value
        raises a UsageError naming its flag."""
        if self.sweep_file is not None:
            raise UsageError("A run of a sweep file takes its sweeps from the file.")
        values = {name: _read(name, self.settings[name]) for name in settings()
                  if self.given(name)}  # fmt: skip
        try:
            return Sweep(**values)
        except ValidationError as exc:
            raise UsageError(_flag_errors(exc)) from None


def _read(name: str, value: Any) -> Any:
    """A run setting's value as the command line gives it, read as the setting's kind."""
    kind, flag_name, example = extra(name)["kind"], flag(name), extra(name)["example"]
    if kind == "names":
        return comma_list(str(value), extra(name)["noun"], example)
    if kind == "budgets":
        return parse_budgets(str(value))
    if kind == "seeds":
        return parse_seeds(str(value))
    if kind == "assignments":
        return parse_assignments(tuple(value), flag_name)
    return value  # counts, the fraction, the rule and the switch come typed


def _within(value: Any, name: str) -> None:
    """A UsageError unless ``value`` (None: not given) lies within the setting's bounds."""
    high = bounds(name).get("le")
    _whole(value, flag(name), high, extra(name)["unit"])


def _check_scale(scale: Any) -> None:
    high = bounds("steps_scale")["le"]
    if not isinstance(scale, int | float) or isinstance(scale, bool):
        raise UsageError(f"--steps-scale must be a number, got {scale!r}.")
    if scale > high:  # inf included; nan and -inf are not positive, below
        raise UsageError(f"--steps-scale {scale} is too large: a run trains at most "
                         f"{high:,} (10^9) steps; give e.g. 0.01 or 2.")  # fmt: skip
    if not scale > 0:  # nan included
        raise UsageError(
            f"--steps-scale must be a positive fraction of the default steps, e.g. 0.01; got "
            f"{scale}."
        )


def _flag_errors(exc: ValidationError) -> str:
    """One line for what pydantic found wrong in a Sweep built from flags, naming the flags."""
    parts = []
    for err in exc.errors():
        field_name = str(err["loc"][0]) if err["loc"] else ""
        named = flag(field_name) if field_name in settings() else field_name or "the sweep"
        message = err["msg"].removeprefix("Value error, ")
        parts.append(f"{named}: {message} (got {err.get('input')!r})"
                     if err["type"] != "value_error" else f"{named}: {message}")  # fmt: skip
    return "; ".join(parts) + "."
