"""The logger contract and the sweep's side of it.

A logger is a class registered under a name (``ssilbench run --log NAME``); the sweep
builds one instance per name with the log directory and, in the process that writes the
store, tells it of each run: its hyper-parameters when it is claimed (:class:`LiveRun`),
its losses and evaluations while it trains (``run_metrics``, from the same events as the
progress display), and the run as the results store records it (:class:`LoggedRun`: its
numbers, evaluations and curves), then closes it at the end. Loggers never see a run's
tensors and cannot change a result; one that raises is reported and left out, the store
stays complete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ssilbench.errors import UsageError


@dataclass(frozen=True)
class Curve:
    """One series of a run: ``values[i]`` at global step ``steps[i]`` (None: not finite)."""

    stage: str
    name: str
    steps: list[int]
    values: list[float | None]

    @property
    def tag(self) -> str:
        """``stage/name``, e.g. ``policy/loss``, ``policy/eval/score``."""
        return f"{self.stage}/{self.name}"


def folder_name(method: str, env: str, budget: str, seed: int, run_id: str) -> str:
    """A run's name fit for a folder: ``bc_maze-10x10_16_s0_1a2b3c4d``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{method}_{env}_{budget}_s{seed}_{run_id[:8]}")


_SPEC_FIELDS = ("method", "env", "budget", "seed", "steps", "eval_every", "stop_early",
                "rollouts")  # fmt: skip


def hyperparameters(spec: Any) -> dict[str, Any]:
    """A run's spec as flat hyper-parameters: ``method``, ``env``, ``budget``, ``seed``,
    ``steps``, ``eval_every``, ``stop_early``, ``rollouts``, then ``config.KEY`` and
    ``options.KEY``; each value a string, number or bool (others as JSON text)."""
    doc = spec.document() if hasattr(spec, "document") else dict(spec)
    flat: dict[str, Any] = {name: doc[name] for name in _SPEC_FIELDS if name in doc}
    for group in ("config", "options"):
        flat.update({f"{group}.{k}": v for k, v in sorted((doc.get(group) or {}).items())})
    return {k: v if isinstance(v, (str, int, float, bool)) else json.dumps(v, sort_keys=True)
            for k, v in flat.items()}  # fmt: skip


@dataclass(frozen=True)
class LiveRun:
    """What a logger gets of a run when the sweep claims it, before it trains."""

    run_id: str
    label: str  # "bc on maze:10x10, N_L=16, seed 0"
    method: str
    env: str
    budget: str
    seed: int
    hparams: dict[str, Any]
    """The run's spec as flat hyper-parameters (:func:`hyperparameters`)."""

    @property
    def short_name(self) -> str:
        """The run's folder name, the same as its :attr:`LoggedRun.short_name`."""
        return folder_name(self.method, self.env, self.budget, self.seed, self.run_id)

    @classmethod
    def of(cls, run_id: str, label: str, spec: Any) -> LiveRun:
        return cls(run_id, label, spec.method, spec.env, spec.budget, spec.seed,
                   hyperparameters(spec))  # fmt: skip


@dataclass(frozen=True)
class LoggedRun:
    """What a logger gets of a recorded run."""

    run_id: str
    label: str  # "bc on maze:10x10, N_L=16, seed 0"
    method: str
    env: str
    budget: str
    seed: int
    config: dict[str, Any]
    options: dict[str, Any]
    score: float | None
    final_score: float | None
    metrics: dict[str, float]
    timeline: list[dict[str, Any]]
    curves: list[Curve] = field(default_factory=list)
    finished_at: float | None = None
    hparams: dict[str, Any] = field(default_factory=dict)
    """The run's spec as flat hyper-parameters (:func:`hyperparameters`)."""

    @property
    def short_name(self) -> str:
        """A name fit for a folder: ``bc_maze-10x10_16_s0_1a2b3c4d``."""
        return folder_name(self.method, self.env, self.budget, self.seed, self.run_id)

    @classmethod
    def of(cls, record: Any) -> LoggedRun:
        """The logged form of a store's ``RunRecord`` (read with its curves)."""
        spec = record.spec
        return cls(
            run_id=record.run_id,
            label=f"{record.method_label} on {record.env_label}, N_L={record.budget}, "
            f"seed {record.seed}",
            method=record.method,
            env=record.env,
            budget=record.budget,
            seed=record.seed,
            config=dict(spec.config),
            options=dict(spec.options),
            score=record.score,
            final_score=record.final_score,
            metrics=dict(record.metrics or {}),
            timeline=list(record.timeline or []),
            curves=[
                Curve(c["stage"], c["name"], list(c["steps"]), list(c["values"]))
                for c in record.curves or []
            ],  # fmt: skip
            finished_at=record.finished_at,
            hparams=hyperparameters(spec),
        )


class RunLogger:
    """Base of a logger. Subclasses override what they use; the sweep calls, in the process
    that writes the results store, ``run_started`` and ``run_hparams`` when it claims a run,
    ``run_metrics`` while the run trains (in this process or a ``--workers`` pool; runs on
    Ray or SLURM are seen when they finish), ``run_finished`` once the store holds it or
    ``run_failed``, and ``close`` at the end of the sweep."""

    name = ""
    """The name it is registered under (set by the sweep)."""

    def __init__(self, log_dir: Path) -> None:
        """``log_dir``: the folder every logger of the sweep writes under (``--log-dir``);
        a logger keeps to its own sub-folder (named after the logger)."""
        self.log_dir = Path(log_dir)

    def run_started(self, run_id: str, label: str) -> None:
        """A run was claimed and starts training."""

    def run_hparams(self, run: LiveRun) -> None:
        """A run was claimed: its hyper-parameters, before it trains."""

    def run_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        """Points of a training run at global ``step``: ``STAGE/loss`` (at most one a second)
        and ``STAGE/eval/NAME`` (each evaluation), tagged as its curves are."""

    def run_finished(self, run: LoggedRun) -> None:
        """A run finished and is recorded in the store."""

    def run_failed(self, run_id: str) -> None:
        """A run failed (the store holds its traceback); nothing more comes of it."""

    def close(self) -> None:
        """The sweep ended: flush and release."""


class LoggerAdapter:
    """The sweep's view of a :class:`RunLogger`: store records in, :class:`LoggedRun` out."""

    def __init__(self, logger: RunLogger) -> None:
        self.logger = logger

    @property
    def name(self) -> str:
        return self.logger.name or type(self.logger).__name__

    def run_started(self, run_id: str, label: str) -> None:
        self.logger.run_started(run_id, label)

    def run_hparams(self, run_id: str, label: str, spec: Any) -> None:
        """``spec``: the claimed run's RunSpec."""
        self.logger.run_hparams(LiveRun.of(run_id, label, spec))

    def run_metrics(self, run_id: str, step: int, values: dict[str, float]) -> None:
        self.logger.run_metrics(run_id, step, values)

    def run_failed(self, run_id: str) -> None:
        self.logger.run_failed(run_id)

    def run_finished(self, record: Any) -> None:
        """``record``: a store's RunRecord (read with its curves), or a LoggedRun."""
        self.logger.run_finished(record if isinstance(record, LoggedRun) else LoggedRun.of(record))

    def close(self) -> None:
        self.logger.close()

    def __repr__(self) -> str:
        return f"logger '{self.logger.name}'"


def parse_log_names(text: str | None) -> list[str]:
    """``"tensorboard,wandb"`` -> the names, in order, each once."""
    names: list[str] = []
    for item in (text or "").split(","):
        item = item.strip()
        if item and item not in names:
            names.append(item)
    return names


def make_loggers(plugins: Any, names: Sequence[str], log_dir: Path) -> list[LoggerAdapter]:
    """An instance of each named logger writing under ``log_dir``; an unknown name, or a
    logger whose package is missing, is an error before any run starts."""
    if not names:
        return []
    log_dir = Path(log_dir).expanduser()
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"Cannot create the log directory {log_dir}: {exc.strerror or exc}. Pass a "
            "writable one with --log-dir DIR."
        ) from None
    out = []
    for name in names:
        cls = plugins.loggers.load(name)
        logger = cls(log_dir)
        logger.name = name
        out.append(LoggerAdapter(logger))
    return out
