"""The sweep process's side of telemetry: what it knows of each running run
(:class:`RunView`) and the listener that hands runs' events to a display and to loggers
(:class:`SweepObserver`). The runs' side, which sends those events (dicts, its ``Event``),
is :mod:`ssilbench.runner.telemetry`; this module does not import it, which keeps the
deprecated names there (``telemetry.SweepObserver``) free of an import circle."""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class RunView:
    """What the sweep process knows of a running run."""

    run_id: str
    label: str
    total: int = 0
    stage: str = ""
    step: int = 0
    loss: float | None = None
    score: float | None = None
    eval_step: int | None = None
    started: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    origin: tuple[int, float] | None = None
    """(step, time) of the first progress event of the current stage: the pace is measured
    from there, not from the claim, so that time queued for a worker, an earlier stage and
    steps restored from a checkpoint do not count as this stage's steps."""
    began_at: int | None = None
    """The steps the run had before its first step here (restored from a checkpoint, or
    stages reused from the cache): not this sweep's work, nor its pace."""
    phase: str = ""
    """One of :data:`ssilbench.runner.telemetry.PHASES` ("" before the run's first event)."""
    detail: str = ""
    """What the phase is about: the stage being evaluated, the rows being labelled, whom a
    waiting run waits for."""
    pid: int | None = None
    """The process that trains the run (from its events)."""
    holder: dict[str, Any] | None = None
    """Whose lease a waiting run waits for (``{"host", "pid"}``)."""
    may_stop_early: bool = False
    """Whether a stopping rule (its spec's ``stop_early``) may end the run's stages before
    their steps: its total, and so :meth:`eta`, is then an upper bound."""

    def eta(self, now: float | None = None) -> float | None:
        """Seconds left of the current stage at its pace so far (None before it has one)."""
        if self.total <= 0:
            return None
        step0, time0 = self.origin if self.origin is not None else (0, self.started)
        if self.step <= step0:
            return None
        spent = (now or time.time()) - time0
        return max(0.0, spent / (self.step - step0) * (self.total - self.step))

    @property
    def reported(self) -> bool:
        """Whether the run has said anything yet (a phase or a step)."""
        return bool(self.phase or self.stage)

    def apply(self, event: dict[str, Any]) -> dict[str, float]:
        """Take in one of the run's events; returns its numbers as ``stage/name`` points
        (what a logger gets live), empty for a phase."""
        self.updated = time.time()
        self.pid = event.get("pid", self.pid)
        kind = event["kind"]
        if kind == "phase":
            self.phase, self.detail = event["phase"], event.get("detail", "")
            self.holder = event.get("holder")
            return {}
        self.phase, self.detail = "training", ""
        if kind == "progress":
            if self.origin is None or event["stage"] != self.stage:
                self.origin = (event["step"], self.updated)
            if self.began_at is None:  # a run's first event comes at its first step here
                self.began_at = max(0, event["step"] - 1)
            self.stage, self.step = event["stage"], event["step"]
            self.total = event.get("total") or self.total
            if event.get("loss") is not None:
                self.loss = event["loss"]
                return {f"{self.stage}/loss": self.loss}
            return {}
        self.stage = event.get("stage", self.stage)
        self.step = max(self.step, event["step"])
        self.eval_step = event["step"]
        self.score = event["result"].get("score")
        return {f"{self.stage}/eval/{name}": float(value)
                for name, value in event["result"].items()
                if isinstance(value, (int, float)) and math.isfinite(value)}  # fmt: skip


class SweepObserver:
    """The sweep process's listener: the sweep's own events (``observer(event, text)``, the
    ``on_progress`` callback of :func:`ssilbench.runner.sweep.run_sweep`), runs' live events
    (:meth:`run_event`) and their recorded results (:meth:`run_ended`), handed to a display
    and to loggers. Subclasses draw; this one keeps the state.

    Loggers hear of a run in order: ``run_started`` and ``run_hparams`` (its spec) when it
    is claimed, ``run_metrics`` for each loss and evaluation its events carry while it
    trains, then ``run_finished`` (recorded) or ``run_failed``; never a point after the
    end, though a pool's events arrive on another thread."""

    def __init__(self, loggers: list[Any] | None = None) -> None:
        self.loggers = list(loggers or [])
        self.runs: dict[str, RunView] = {}
        self.lock = threading.Lock()
        self._logging = threading.Lock()  # one logger call at a time, in the order above

    def __call__(self, event: str, text: str) -> None:
        """The sweep's events: start, claimed, done, failed, skipped."""

    def run_started(self, run_id: str, label: str, total: int, spec: Any = None) -> None:
        """A run was claimed; ``spec``: its RunSpec, the loggers' hyper-parameters."""
        with self._logging:
            with self.lock:
                stops = bool(getattr(spec, "stop_early", False))
                self.runs[run_id] = RunView(run_id, label, total, may_stop_early=stops)
            for logger in self.loggers:
                _call(logger, "run_started", run_id, label)
                if spec is not None:
                    _call(logger, "run_hparams", run_id, label, spec)

    def run_event(self, event: dict[str, Any]) -> None:
        """A live event of a run (from this process or a pool worker)."""
        with self._logging:
            with self.lock:
                view = self.runs.get(event.get("run_id", ""))
                if view is None:
                    return
                points = view.apply(event)
            if points:
                for logger in self.loggers:
                    _call(logger, "run_metrics", view.run_id, view.step, points)

    def holder_of(self, holder: dict[str, Any] | None) -> str:
        """The run that holds a lease (``{"host", "pid"}``): its label when it is one of
        this sweep's runs on this host, else ``host pid N``."""
        if not holder:
            return "another process"
        if holder.get("host") == socket.gethostname():
            with self.lock:
                for view in self.runs.values():
                    if view.pid == holder.get("pid") and view.phase != "waiting":
                        return view.label
        return f"{holder.get('host') or '?'} pid {holder.get('pid', '?')}"

    def run_ended(self, run_id: str, record: Any) -> None:
        """A run was recorded: ``record`` is its RunRecord as the store now holds it, curves
        included (None when it failed). The loggers get a finished run; the run leaves the
        display."""
        with self._logging:
            with self.lock:
                self.runs.pop(run_id, None)
            for logger in self.loggers:
                if record is not None:
                    _call(logger, "run_finished", record)
                else:
                    _call(logger, "run_failed", run_id)

    def close(self) -> None:
        with self._logging:
            for logger in self.loggers:
                _call(logger, "close")


def _call(logger: Any, name: str, *args: Any) -> None:
    """``logger.name(*args)`` where the logger has it. A logger that raises is reported once
    on stderr and left out from then on: the store holds every run whatever a logger does."""
    method = getattr(logger, name, None)
    if method is None or getattr(logger, "_ssilbench_failed", False):
        return
    try:
        method(*args)
    except Exception as exc:
        import sys

        with contextlib.suppress(Exception):
            logger._ssilbench_failed = True
        who = getattr(logger, "name", "") or type(logger).__name__
        print(f"warning: logger {who} failed in {name} "
              f"({type(exc).__name__}: {exc}); it is left out for the rest of the sweep, "
              "the results store is complete.", file=sys.stderr)  # fmt: skip
