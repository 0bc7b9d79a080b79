"""A sweep's progress on stderr, run by run: a live display in a terminal, plain lines
otherwise (a log file, SLURM's output).

Both show, for each running run, its stage, step/total, latest training loss, last
evaluation and an estimate of the time left (from the events of
:mod:`ssilbench.runner.telemetry`). The plain form writes one line per running run every
``every`` seconds (``SSILBENCH_PROGRESS_EVERY``, default 30) and one line when a run ends;
every line fits 80 columns. A run the sweep has claimed but that has reported no step yet
(queued for a pool worker, or preparing) is counted as waiting, not drawn as a row: a pool
claims every run when it starts, and 70 rows of "starting 0/200k" every 30 s hid the few
that train.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TextIO

from ssilbench.errors import UsageError
from ssilbench.runner.telemetry import RunView, SweepObserver

EVERY_ENV = "SSILBENCH_PROGRESS_EVERY"
DEFAULT_EVERY = 30.0
WIDTH = 80
MAX_ROWS = 12  # runs shown at once in the live display; "+N more" for the rest


def progress_every() -> float:
    """Seconds between two rounds of plain progress lines (``SSILBENCH_PROGRESS_EVERY``)."""
    text = os.environ.get(EVERY_ENV, "").strip()
    if not text:
        return DEFAULT_EVERY
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value != value:
        raise UsageError(
            f"{EVERY_ENV}={text!r} is not a number of seconds > 0; set it to e.g. 30, or unset it."
        )
    return value


def short_count(n: int) -> str:
    """1234 -> "1.2k", 25_000_000 -> "25M": step counts in a narrow column."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size:
            value = n / size
            text = f"{value:.1f}" if value < 10 else f"{value:.0f}"
            return text.removesuffix(".0") + unit
    return str(n)


def duration(seconds: float | None) -> str:
    """12 -> "0:12", 3725 -> "1:02:05"; "?" when unknown."""
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def run_status(view: RunView, now: float | None = None) -> str:
    """``stage 1.2k/5k loss 0.231 eval 0.81@1k eta 1:20``: a run's state in words."""
    parts = [view.stage or "starting"]
    if view.total:
        parts.append(f"{short_count(view.step)}/{short_count(view.total)}")
    if view.loss is not None:
        parts.append(f"loss {_number(view.loss)}")
    if view.eval_step is not None:
        parts.append(f"eval {_number(view.score)}@{short_count(view.eval_step)}")
    parts.append(f"eta {duration(view.eta(now))}")
    return " ".join(parts)


_LABEL = re.compile(r"^(?P<what>.*) on (?P<env>.*), N_L=(?P<budget>[^,]*), seed (?P<seed>-?\d+)$")


def compact(label: str, room: int) -> str:
    """A run's label (``M on E, N_L=B, seed S``) as ``M E N=B sS`` in ``room`` columns: the
    method and environment are cut first, so that the budget and seed stay readable."""
    found = _LABEL.match(label)
    if found is None:
        return label if len(label) <= room else label[: max(0, room - 3)] + "..."
    head = f"{found['what']} {found['env']}"
    tail = f" N={found['budget']} s{found['seed']}"
    if len(head) + len(tail) > room:
        head = head[: max(0, room - len(tail) - 2)] + ".."
    return head + tail


def fit(label: str, status: str, width: int = WIDTH) -> str:
    """``label | status`` in ``width`` columns: the label is shortened first."""
    room = width - len(status) - 3
    if room < 12:  # a very long status: cut it instead
        return (compact(label, 20) + " | " + status)[:width]
    return f"{compact(label, room)} | {status}"


class PlainProgress(SweepObserver):
    """Plain lines on ``stream``: the running runs every ``every`` seconds, each end."""

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        every: float | None = None,
        loggers: Sequence[Any] = (),
    ) -> None:
        super().__init__(list(loggers))
        self.total = total
        self.stream = stream or sys.stderr
        self.every = progress_every() if every is None else every
        self.counts = {"done": 0, "failed": 0, "skipped": 0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ssilbench-progress", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _write(self, line: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        self.stream.write(f"{stamp} {line}"[:WIDTH] + "\n")
        self.stream.flush()

    def _tally(self) -> str:
        ended = self.counts["done"] + self.counts["failed"] + self.counts["skipped"]
        return f"{ended}/{self.total}"

    def __call__(self, event: str, text: str) -> None:
        if event in self.counts:
            self.counts[event] += 1
        if event in ("done", "failed"):
            self._write(f"{event} {self._tally()}: {text}")

    def round(self) -> None:
        """One line per running run, now, and one for the runs still waiting."""
        now = time.time()
        with self.lock:
            views = list(self.runs.values())
        running = [view for view in views if view.stage]
        for view in running:
            self._write(fit(view.label, run_status(view, now), WIDTH - 9))
        if len(running) < len(views):
            self._write(f"{len(views) - len(running)} more claimed, waiting for their first step")

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.round()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        super().close()


class LiveProgress(SweepObserver):
    """A rich live display on stderr: the sweep's bar and a row per running run."""

    def __init__(self, total: int, console: Any = None, loggers: Sequence[Any] = ()) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        super().__init__(list(loggers))
        self.console = console or Console(stderr=True)
        self.bar = Progress(
            TextColumn("[bold]sweep"),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("[green]{task.fields[done]} done[/] · {task.fields[running]} running · "
                       "{task.fields[waiting]} waiting · [red]{task.fields[failed]} failed[/]"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
        )  # fmt: skip
        self.counts = {"done": 0, "failed": 0}
        self.task = self.bar.add_task("", total=total, running=0, waiting=0, **self.counts)
        self.live: Any = None

    def start(self) -> None:
        from rich.live import Live

        self.live = Live(console=self.console, get_renderable=self.render,
                         refresh_per_second=2, transient=False)  # fmt: skip
        self.live.start()

    def render(self) -> Any:
        from rich.console import Group
        from rich.table import Table

        table = Table.grid(padding=(0, 1))
        table.add_column(overflow="ellipsis", no_wrap=True, ratio=1)
        for name in ("stage", "step", "loss", "eval", "eta"):
            table.add_column(name, no_wrap=True, justify="right" if name != "stage" else "left")
        now = time.time()
        with self.lock:
            views = sorted((v for v in self.runs.values() if v.stage), key=lambda v: v.started)
            waiting = len(self.runs) - len(views)
        self.bar.update(self.task, running=len(views), waiting=waiting)
        for view in views[:MAX_ROWS]:
            share = f"{100 * view.step / view.total:.0f}%" if view.total else ""
            evaluation = (f"{_number(view.score)}@{short_count(view.eval_step)}"
                          if view.eval_step is not None else "-")  # fmt: skip
            table.add_row(
                f"[dim]{view.label}[/]",
                view.stage,
                f"{short_count(view.step)}/{short_count(view.total)} {share}",
                f"loss {_number(view.loss)}",
                f"eval {evaluation}",
                f"eta {duration(view.eta(now))}",
            )
        if len(views) > MAX_ROWS:
            table.add_row(f"[dim]+{len(views) - MAX_ROWS} more running[/]", "", "", "", "", "")
        return Group(self.bar, table) if views else self.bar

    def __call__(self, event: str, text: str) -> None:
        if event in ("start", "claimed"):
            return
        if event in ("done", "failed"):
            self.counts[event] += 1
            if event == "failed":
                self.console.print(f"[red]failed[/red] {text}")
        self.bar.advance(self.task)
        self.bar.update(self.task, **self.counts)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
        super().close()


@contextmanager
def sweep_progress(
    total: int,
    loggers: Sequence[Any] = (),
    live: bool | None = None,
    stream: TextIO | None = None,
    every: float | None = None,
) -> Iterator[SweepObserver]:
    """The progress of a sweep of ``total`` runs on stderr (``stream``), live when it is a
    terminal (``live``: force one or the other); yields the observer to hand to ``run_sweep``
    as its ``on_progress``. ``loggers`` get every recorded run."""
    stream = stream or sys.stderr
    if live is None:
        live = stream.isatty()
    observer: LiveProgress | PlainProgress
    if live:
        from rich.console import Console

        observer = LiveProgress(total, Console(file=stream), loggers)
    else:
        observer = PlainProgress(total, stream, every, loggers)
    observer.start()
    try:
        yield observer
    finally:
        observer.close()


@contextmanager
def quiet_observer(loggers: Sequence[Any] = ()) -> Iterator[SweepObserver]:
    """No output, loggers only (``--quiet`` with ``--log``)."""
    observer = SweepObserver(list(loggers))
    try:
        yield observer
    finally:
        observer.close()
