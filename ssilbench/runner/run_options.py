"""The settings of one ``ssilbench run`` (or ``plan``), checked before anything is planned.

:class:`RunOptions` holds every setting as the command line gives it (comma-separated lists
stay text until :meth:`RunOptions.sweep` parses them), so that a library caller and the
command see the same checks and the same messages. Flags that do not fit together raise a
:class:`~ssilbench.errors.UsageError` when the object is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ssilbench.errors import UsageError

if TYPE_CHECKING:
    from ssilbench.runner.spec import Sweep

EXECUTORS = ("local", "ray", "slurm")


def comma_list(text: str, what: str, example: str) -> list[str]:
    """The items of a comma-separated flag value, duplicates removed, order kept; ``what``
    and ``example`` name the list in the message for an empty one."""
    items = list(dict.fromkeys(i.strip() for i in text.split(",") if i.strip()))
    if not items:
        raise UsageError(f"The {what} list is empty: write e.g. {example}.")
    return items


def parse_seeds(text: str) -> list[int]:
    """The integer seeds of a ``--seeds`` value, duplicates removed, order kept."""
    seeds = []
    for item in comma_list(text, "seed", "--seeds 0,1,2"):
        try:
            seeds.append(int(item))
        except ValueError:
            raise UsageError(
                f"Seed {item!r} is not an integer: write e.g. --seeds 0,1,2."
            ) from None
    return list(dict.fromkeys(seeds))


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

    A sweep comes from ``sweep_file`` (with ``quick`` and ``blocks``) or from ``methods``,
    ``envs`` and ``budgets`` (comma-separated, as the flags take them) with the settings
    after them. ``dry_run`` plans without claiming or training anything; ``save_timings``
    keeps the step times a dry run measured (``ssilbench plan``).
    """

    results: Path
    data_root: Path
    sweep_file: Path | None = None
    quick: bool = False
    blocks: str | None = None
    methods: str | None = None
    envs: str | None = None
    budgets: str | None = None
    seeds: str | None = None
    config: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    steps: int | None = None
    steps_scale: float | None = None
    device: str = "auto"
    retry_failed: bool = False
    workers: int = 1
    eval_every: int | None = None
    stop_early: bool = False
    no_rollouts: bool = False
    threads: int | None = None
    stack: bool = True
    cache: bool = True
    checkpoint_every: int | None = None
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    dry_run: bool = False
    save_timings: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        # Paths as the command line gives them ('~' included) become the folders they name.
        object.__setattr__(self, "results", Path(self.results).expanduser())
        object.__setattr__(self, "data_root", Path(self.data_root).expanduser())
        if self.sweep_file is not None:
            object.__setattr__(self, "sweep_file", Path(self.sweep_file))
            self._check_sweep_file_flags()
        else:
            self._check_sweep_flags()
        self.executor.validate(self.workers)

    def _check_sweep_file_flags(self) -> None:
        given = [f for f, v in (("--method", self.methods), ("--env", self.envs),
                                ("--budgets", self.budgets), ("--config", self.config),
                                ("--option", self.options), ("--steps", self.steps),
                                ("--steps-scale", self.steps_scale), ("--seeds", self.seeds),
                                ("--eval-every", self.eval_every),
                                ("--stop-early", self.stop_early),
                                ("--no-rollouts", self.no_rollouts))
                 if v]  # fmt: skip
        if given:
            raise UsageError(
                f"--sweep takes methods, environments and budgets from the file; drop "
                f"{', '.join(given)}."
            )

    def _check_sweep_flags(self) -> None:
        if self.quick or self.blocks is not None:
            raise UsageError(f"{'--quick' if self.quick else '--blocks'} needs --sweep FILE.")
        missing = [f for f, v in (("--method", self.methods), ("--env", self.envs),
                                  ("--budgets", self.budgets)) if not v]  # fmt: skip
        if missing:
            raise UsageError(
                f"Missing {', '.join(missing)}: give --method, --env and --budgets, or --sweep "
                "FILE."
            )
        steps, scale = self.steps, self.steps_scale
        if steps is not None and steps < 1:
            raise UsageError(f"--steps must be a positive integer, got {steps}.")
        if scale is not None and not scale > 0:
            raise UsageError(
                f"--steps-scale must be a positive fraction of the default steps, e.g. 0.01; "
                f"got {scale}."
            )
        if scale is not None and steps is not None:
            raise UsageError("Give --steps or --steps-scale, not both.")

    @property
    def datasets(self) -> str:
        """How planning treats datasets: a dry run only reads those already there."""
        return "read" if self.dry_run else "prepare"

    def block_names(self) -> list[str]:
        """The ``--blocks`` names and panels of a sweep file (none given: every block)."""
        if self.blocks is None:
            return []
        return comma_list(self.blocks, "block", "--blocks positions")

    def sweep(self) -> Sweep:
        """The sweep the list flags describe (not for a sweep file); a malformed list raises
        a UsageError naming its flag."""
        from pydantic import ValidationError

        from ssilbench.data.split import parse_budgets
        from ssilbench.runner.plan import parse_assignments
        from ssilbench.runner.spec import Sweep

        if self.sweep_file is not None:
            raise UsageError("A run of a sweep file takes its sweeps from the file.")
        try:
            return Sweep(
                methods=comma_list(self.methods or "", "method", "--method bc,vm_idm"),
                envs=comma_list(self.envs or "", "environment", "--env maze:10x10"),
                budgets=parse_budgets(self.budgets or ""),
                seeds=parse_seeds(self.seeds if self.seeds is not None else "0"),
                config=parse_assignments(self.config, "--config"),
                options=parse_assignments(self.options, "--option"),
                steps=self.steps,
                steps_scale=self.steps_scale,
                eval_every=self.eval_every,
                stop_early=self.stop_early,
                rollouts=not self.no_rollouts,
            )
        except ValidationError as exc:
            raise UsageError(str(exc)) from None
