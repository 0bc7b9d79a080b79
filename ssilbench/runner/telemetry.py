"""What a run reports while it trains: progress events (throttled) and curves (thinned).

Each run gets a :class:`RunTelemetry` (``StagePlan.telemetry``). The training loops hand it
every step's loss tensor (``train_loss``); evaluations and ``ctx.log_metric`` add points too.
Two things come out of it:

- **events**, at most one progress event per run every :data:`EMIT_EVERY` seconds (plus one
  per evaluation and per stage change, and one per change of phase: preparing data,
  evaluating, labelling, waiting for a shared stage, queued behind another stacked group;
  see :data:`PHASES`), sent to the
  process's event sink: in the sweep's own process straight to the
  :class:`~ssilbench.runner.observer.SweepObserver`,
  from a pool worker through a multiprocessing queue the sweep drains (:func:`events_to`).
  Ray and SLURM workers have no sink: their runs are seen when they finish. The observer
  hands them to the progress display and, as points, to the loggers.
- **curves**, recorded at deterministic steps (a stride that doubles as a series grows; the
  first and last points always kept), thinned to at most :data:`MAX_POINTS` points per
  series when the run finishes, returned with its outcome and written to the store's
  ``curves`` table by the sweep process.

Nothing here reads a random generator or changes a tensor, so a run's result is the same
with or without anyone watching. The per-step cost is a modulo, a comparison and a clock
read; a loss tensor is converted to a number only when an event is sent (a device sync at
most every :data:`EMIT_EVERY` seconds on a GPU) and once per kept point when the run ends.
"""

from __future__ import annotations

import contextlib
import math
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

MAX_POINTS = 1000
"""Points per series kept in the store at most."""
EMIT_EVERY = 1.0
"""Seconds between two progress events of a run at least."""

Event = dict[str, Any]
Sink = Callable[[Event], None]

PHASES = ("preparing data", "training", "evaluating", "labelling", "waiting", "queued")
"""What a run is doing: ``training`` is said by its progress events; the others by a
``phase`` event each (:meth:`RunTelemetry.phase`), until the next progress or evaluation."""


def thin(steps: list[int], values: list[Any], limit: int = MAX_POINTS) -> tuple[list, list]:
    """At most ``limit`` points of a series, evenly spread over its indices, the first and the
    last always among them; the same points for the same series (no randomness)."""
    n = len(steps)
    if n <= limit:
        return list(steps), list(values)
    if limit < 2:
        return [steps[-1]], [values[-1]]
    # Index i*(n-1)/(limit-1), rounded down, for i = 0..limit-1: strictly increasing since
    # n > limit, first 0 and last n-1.
    keep = [(i * (n - 1)) // (limit - 1) for i in range(limit)]
    return [steps[i] for i in keep], [values[i] for i in keep]


class Series:
    """One curve while it grows: the points whose step is a multiple of a stride that doubles
    whenever more than ``2 * limit`` are held, plus the first and the latest point."""

    __slots__ = ("limit", "stride", "steps", "values", "first", "last")

    def __init__(self, limit: int = MAX_POINTS) -> None:
        self.limit = limit
        self.stride = 1
        self.steps: list[int] = []
        self.values: list[Any] = []
        self.first: tuple[int, Any] | None = None
        self.last: tuple[int, Any] | None = None

    def add(self, step: int, value: Any) -> None:
        if self.first is None:
            self.first = (step, value)
        self.last = (step, value)
        if step % self.stride:
            return
        self.steps.append(step)
        self.values.append(value)
        if len(self.steps) > 2 * self.limit:
            self.stride *= 2
            kept = [(s, v) for s, v in zip(self.steps, self.values, strict=True)
                    if s % self.stride == 0]  # fmt: skip
            self.steps = [s for s, _ in kept]
            self.values = [v for _, v in kept]

    def wants(self, step: int) -> bool:
        """Whether :meth:`add` at ``step`` keeps the point beyond its being the latest (so that
        a caller can skip building a value nobody keeps)."""
        return self.first is None or step % self.stride == 0

    def points(self) -> tuple[list[int], list[Any]]:
        """The kept points with the first and the last, thinned to ``limit``."""
        pairs = dict(zip(self.steps, self.values, strict=True))
        for point in (self.first, self.last):
            if point is not None:
                pairs[point[0]] = point[1]
        steps = sorted(pairs)
        return thin(steps, [pairs[s] for s in steps], self.limit)


def _number(value: Any) -> float | None:
    """A JSON-safe float (None for NaN and infinities)."""
    value = float(value)
    return value if math.isfinite(value) else None


class RunTelemetry:
    """One run's progress events and curves (see the module's docstring)."""

    def __init__(
        self,
        run_id: str,
        total: int,
        sink: Sink | None = None,
        every: float = EMIT_EVERY,
        limit: int = MAX_POINTS,
    ) -> None:
        self.run_id = run_id
        self.total = total
        self.sink = sink
        self.every = every
        self.limit = limit
        self.series: dict[tuple[str, str], Series] = {}
        self.stage = ""
        self._loss: Any = None  # the latest loss tensor (or number), converted when sent
        self._loss_index: int | None = None
        self._next = time.monotonic() + every
        self._step = 0
        self._last_eval: Event | None = None
        self._pid = os.getpid()  # lets the sweep tell whose lease a waiting run waits for

    # -- called by the training loops, every step -------------------------------------------
    def train_loss(self, stage: str, step: int, loss: Any, index: int | None = None) -> None:
        """The loss of the step that brought the run to global ``step`` (a 0-d tensor, or a
        vector of a stacked group's losses and this run's ``index`` in it)."""
        series = self.series.get((stage, "loss"))
        if series is None:
            series = self.series[(stage, "loss")] = Series(self.limit)
        if series.wants(step) or index is None:
            series.add(step, loss if index is None else loss[index])
        else:  # only the latest: kept as the vector and the index until needed
            series.last = (step, _Pick(loss, index))
        self._loss, self._loss_index, self._step = loss, index, step
        if stage != self.stage:
            self.stage = stage
            self._emit_progress()
        elif time.monotonic() >= self._next:
            self._emit_progress()

    def progress(self, stage: str, step: int) -> None:
        """A step of a loop that reports no loss (a plugin's own loop)."""
        self._step = step
        if stage != self.stage:
            self.stage = stage
            self._emit_progress()
        elif time.monotonic() >= self._next:
            self._emit_progress()

    def forgo(self, steps: int) -> None:
        """``steps`` the run will not take after all (a stage that stopped early): the total
        its progress counts to, and so its time left, shrinks by them; said at once."""
        self.total = max(self._step, self.total - max(0, steps))
        if self.stage:
            self._emit_progress()

    # -- called by the run's harness ----------------------------------------------------------
    def evaluation(self, stage: str, step: int, result: dict[str, Any]) -> None:
        """An evaluation at ``step``: each of its numbers becomes a point of ``eval/NAME``."""
        numbers = {k: v for k, v in result.items() if k != "step"}
        for name, value in numbers.items():
            if value is None or isinstance(value, (int, float)):
                self.metric(stage, "eval/" + name, step, value)
        self._last_eval = {"step": step, **numbers}
        self._send({"kind": "eval", "stage": stage, "step": step, "result": numbers})

    def phase(self, name: str, detail: str = "", holder: dict[str, Any] | None = None) -> None:
        """The run now does ``name`` (one of :data:`PHASES`; ``detail`` says on what);
        ``holder`` (``{"host", "pid"}``): whose lease a waiting run waits for."""
        event: Event = {"kind": "phase", "phase": name, "detail": detail, "step": self._step}
        if holder is not None:
            event["holder"] = holder
        self._send(event)

    def metric(self, stage: str, name: str, step: int, value: Any) -> None:
        """A point of the series ``name`` of ``stage`` (``ctx.log_metric``)."""
        series = self.series.get((stage, name))
        if series is None:
            series = self.series[(stage, name)] = Series(self.limit)
        series.add(step, value)

    def curves(self) -> list[dict[str, Any]]:
        """Every series, thinned: ``{"stage", "name", "steps", "values"}`` each, values as
        floats (None where not finite), ordered by stage then name as first recorded."""
        out = []
        for (stage, name), series in self.series.items():
            steps, values = series.points()
            out.append({"stage": stage, "name": name, "steps": steps,
                        "values": _numbers(values)})  # fmt: skip
        return out

    def finished(self) -> None:
        """One last progress event (the step the run ended at)."""
        self._emit_progress()

    # -- events ------------------------------------------------------------------------------
    def _emit_progress(self) -> None:
        self._next = time.monotonic() + self.every
        if self.sink is None:
            return
        loss = None
        if self._loss is not None:
            value = self._loss if self._loss_index is None else self._loss[self._loss_index]
            loss = _number(value)
        self._send({"kind": "progress", "stage": self.stage, "step": self._step,
                    "total": self.total, "loss": loss})  # fmt: skip

    def _send(self, event: Event) -> None:
        if self.sink is None:
            return
        event["run_id"] = self.run_id
        event["time"] = time.time()
        event["pid"] = self._pid
        # A watcher that fails (a closed queue at shutdown) must not fail the run.
        with contextlib.suppress(Exception):
            self.sink(event)


class _Pick:
    """``vector[index]``, taken only if the point is kept."""

    __slots__ = ("vector", "index")

    def __init__(self, vector: Any, index: int) -> None:
        self.vector, self.index = vector, index

    def __float__(self) -> float:
        return float(self.vector[self.index])


def _numbers(values: list[Any]) -> list[float | None]:
    """Points as JSON-safe floats (a tensor's conversion syncs its device: once per kept
    point, when the run ends)."""
    out: list[float | None] = []
    for value in values:
        out.append(None if value is None else _number(value))
    return out


# -- where a process's events go ---------------------------------------------------------------
_SINK: dict[str, Sink | None] = {"sink": None}


def current_sink() -> Sink | None:
    """The event sink of this process (None: nobody watches)."""
    return _SINK["sink"]


@contextlib.contextmanager
def events_to(sink: Sink | None) -> Iterator[None]:
    """Send this process's run events to ``sink`` for the block."""
    before = _SINK["sink"]
    _SINK["sink"] = sink
    try:
        yield
    finally:
        _SINK["sink"] = before


def announce(run_ids: list[str], phase: str, detail: str = "") -> None:
    """Tell the sweep that the runs ``run_ids`` are in ``phase`` before they have a
    :class:`RunTelemetry` (a pool worker opening their datasets)."""
    sink = current_sink()
    for run_id in run_ids if sink is not None else []:
        with contextlib.suppress(Exception):
            sink({"kind": "phase", "phase": phase, "detail": detail, "step": 0,
                  "run_id": run_id, "time": time.time(), "pid": os.getpid()})  # fmt: skip


def set_sink(sink: Sink | None) -> None:
    """Send this process's run events to ``sink`` from now on (a pool worker's initializer)."""
    _SINK["sink"] = sink


def queue_sink(events: Any) -> Sink:
    """A sink that puts events on a multiprocessing queue without ever blocking the run."""

    def put(event: Event) -> None:
        with contextlib.suppress(queue.Full):
            events.put_nowait(event)

    return put


@contextlib.contextmanager
def drained(events: Any, handle: Sink) -> Iterator[None]:
    """Hand every event put on ``events`` to ``handle`` in a background thread of this
    process, for the block (and what is left when it ends)."""
    stop = threading.Event()

    def drain() -> None:
        while not stop.is_set():
            try:
                event = events.get(timeout=0.2)
            except queue.Empty:
                continue
            except (EOFError, OSError, ValueError):  # the queue closed under us
                return
            with contextlib.suppress(Exception):
                handle(event)

    thread = threading.Thread(target=drain, name="ssilbench-events", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=5)
        with contextlib.suppress(Exception):
            while True:
                handle(events.get_nowait())


_MOVED = ("RunView", "SweepObserver")
"""The sweep process's side, in :mod:`ssilbench.runner.observer` since API 1.2."""


def __getattr__(name: str) -> Any:
    """``RunView`` and ``SweepObserver`` from here still work, with a DeprecationWarning."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from ssilbench.deprecation import deprecated
    from ssilbench.runner import observer

    deprecated(f"{__name__}.{name}", f"import {name} from ssilbench.runner.observer", "1.2")
    return getattr(observer, name)
