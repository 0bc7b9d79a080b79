"""A sweep's progress on stderr, run by run: a live display in a terminal, plain lines
otherwise (a log file, SLURM's output, CI).

Both show, for each running run, its phase (preparing data, training STAGE, evaluating,
labelling, waiting for a shared stage and whom for, queued behind another group of its
stacked unit), step/total, latest training loss, last evaluation and an estimate of the
time left (from the events of :mod:`ssilbench.runner.telemetry`, kept by
:mod:`ssilbench.runner.observer`). The plain form writes a line when a unit of runs starts
(so the first line comes at once), one per running run :data:`FIRST_ROUND` seconds after the
start and then every ``every`` seconds (``SSILBENCH_PROGRESS_EVERY``, default 30), and one
when a run ends. Every plain line starts with the sweep's count of runs ended and the time
it has left, and fits :data:`WIDTH` columns: a run's config is shortened first, then its
loss and last evaluation are left out, then its method and environment are cut; its N_L and
seed always stay. A run the sweep has claimed but that has said nothing yet (its pool
worker is starting; on Ray or SLURM, until it ends) is counted, not drawn, as are runs
preparing data or queued beyond a few.
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
from ssilbench.runner.observer import RunView, SweepObserver

EVERY_ENV = "SSILBENCH_PROGRESS_EVERY"
DEFAULT_EVERY = 30.0
FIRST_ROUND = 5.0  # seconds from the start to the first round of run lines (at most)
WIDTH = 100
MAX_ROWS = 12  # runs shown at once in the live display; "+N more" for the rest
GROUPED = 3  # more runs than this preparing data (or queued) are one line
TRAINING = ("training", "evaluating", "")  # phases in which a run's pace is its stage's


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


def _restored(view: RunView) -> float:
    """The share of a run's steps it had before it stepped here."""
    return min(1.0, view.began_at / view.total) if view.total and view.began_at else 0.0


def phase_words(view: RunView, holder: str = "") -> str:
    """What the run does, in words: ``training policy``, ``evaluating policy``,
    ``labelling 40,000 rows``, ``waiting for shared idm (held by LABEL)``."""
    phase = view.phase or ("training" if view.stage else "claimed")
    if phase == "training":
        return f"training {view.stage}".rstrip()
    if phase == "waiting":
        return f"waiting for shared {view.detail or 'stage'}" + (
            f" (held by {holder})" if holder else "")  # fmt: skip
    if phase == "queued":
        return f"queued ({view.detail})" if view.detail else "queued"
    return f"{phase} {view.detail}".rstrip()


def eta_words(view: RunView, now: float | None = None) -> str | None:
    """A training run's time left as shown, ``<=`` before it where a stopping rule may end
    its stages sooner (its total is then a bound); None when it has no pace to go by."""
    eta = view.eta(now) if view.phase in TRAINING else None
    if eta is None:
        return None
    return ("<=" if view.may_stop_early else "") + duration(eta)


def status_parts(view: RunView, now: float | None = None, holder: str = "") -> list[str]:
    """A run's state as parts, the ones left out first when room is short last: phase,
    step/total, eta, last evaluation, loss (the curves keep every loss; a log reader
    looks for the score)."""
    parts = [phase_words(view, holder)]
    if view.total and view.reported and view.phase not in ("preparing data", "queued"):
        parts.append(f"{short_count(view.step)}/{short_count(view.total)}")
    eta = eta_words(view, now)
    if eta is not None:
        parts.append(f"eta {eta}")
    if view.eval_step is not None:
        parts.append(f"eval {_number(view.score)}@{short_count(view.eval_step)}")
    if view.loss is not None:
        parts.append(f"loss {_number(view.loss)}")
    return parts


def run_status(view: RunView, now: float | None = None, holder: str = "") -> str:
    """``training policy 1.2k/5k eta 1:20 eval 0.81@1k loss 0.231``: a run's state."""
    return " ".join(status_parts(view, now, holder))


_LABEL = re.compile(r"^(?P<what>.*) on (?P<env>.*), N_L=(?P<budget>[^,]*), seed (?P<seed>-?\d+)$")
_SETTINGS = re.compile(r"^(?P<name>[^ (]+)(?: \((?P<settings>.*)\))?$")


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: max(0, room - 2)] + ".."


def _name_and_settings(text: str) -> tuple[str, str | None]:
    """``"bc (arch=mlp5, lr=0.1)"`` -> ``("bc", "arch=mlp5, lr=0.1")``."""
    found = _SETTINGS.match(text)
    return (found["name"], found["settings"]) if found else (text, None)


def compact(label: str, room: int) -> str:
    """A run's label (``M (CONFIG) on E (OPTIONS), N_L=B, seed S``) in ``room`` columns: as
    it is when it fits, else ``M (CONFIG) E (OPTIONS) N=B sS`` with the config shortened
    first, then the options, then the method and environment, so that N_L and seed stay."""
    if len(label) <= room:
        return label
    found = _LABEL.match(label)
    if found is None:
        return _cut(label, room)
    method, config = _name_and_settings(found["what"])
    env, options = _name_and_settings(found["env"])
    tail = f" N={found['budget']} s{found['seed']}"

    def text(config: str | None, options: str | None) -> str:
        head = method + (f" ({config})" if config is not None else "")
        return head + f" {env}" + (f" ({options})" if options is not None else "") + tail

    full = text(config, options)
    excess = len(full) - room
    if excess > 0 and config:
        config = _cut(config, max(2, len(config) - excess))
        excess = len(text(config, options)) - room
    if excess > 0 and options:
        options = _cut(options, max(2, len(options) - excess))
        excess = len(text(config, options)) - room
    if excess <= 0:
        return text(config, options)
    return _cut(f"{method} {env}", max(2, room - len(tail))) + tail


def _names_only(label: str) -> int:
    """The width of the label with its config and options shortened as far as they go
    (``(..)``), method and environment whole."""
    found = _LABEL.match(label)
    if found is None:
        return 12
    method, config = _name_and_settings(found["what"])
    env, options = _name_and_settings(found["env"])
    return (len(method) + len(env) + len(f"  N={found['budget']} s{found['seed']}")
            + 5 * (config is not None) + 5 * (options is not None))  # fmt: skip


def fit(label: str, parts: list[str] | str, width: int = WIDTH) -> str:
    """``label | status`` in ``width`` columns: the label's config is shortened first,
    then the status's last parts are left out (two stay), then the label's method and
    environment are cut (N_L and seed stay)."""
    parts = [parts] if isinstance(parts, str) else list(parts)
    shortest = min(len(label), _names_only(label))
    while len(parts) > 2 and shortest + len(" ".join(parts)) + 3 > width:
        parts.pop()
    status = " ".join(parts)
    room = width - len(status) - 3
    if room < 12:  # a very long status: cut it instead
        return (compact(label, 20) + " | " + status)[:width]
    return f"{compact(label, room)} | {status}"


class PacedProgress(SweepObserver):
    """A display's counts of the sweep's runs and its time left, the same in plain lines
    and in the live display."""

    def __init__(self, total: int, loggers: Sequence[Any] = ()) -> None:
        super().__init__(list(loggers))
        self.total = total
        self.counts = {"done": 0, "failed": 0, "skipped": 0}
        self.restored = 0.0  # the ended runs' shares done before they stepped here
        self.began = time.time()

    def count(self, event: str) -> None:
        """Count a sweep event (done, failed, skipped)."""
        if event in self.counts:
            self.counts[event] += 1

    def sweep_eta(self, now: float | None = None) -> float | None:
        """Seconds the sweep has left at its pace so far: the share of its runs done,
        counting each running run's steps, over the time since it started (None before
        any step; skipped runs count for nothing), and never less than its training runs'
        own time left (parallel runs make the share grow faster than the last run ends). A
        run that is not training (queued behind another group, labelling, waiting) makes no
        steps meanwhile: its own pace would grow without bound, so it is left out there.
        Steps a run had before it stepped here (resumed from a checkpoint, stages reused from
        the cache) are neither done nor to do: counted as done, a resumed sweep's first
        minutes would promise its end within minutes."""
        now = now or time.time()
        todo = self.total - self.counts["skipped"]
        if todo <= 0:
            return 0.0
        with self.lock:
            views = list(self.runs.values())
            restored = self.restored
        partial = sum(max(0.0, min(1.0, v.step / v.total) - _restored(v)) for v in views
                      if v.total)  # fmt: skip
        work = todo - restored - sum(_restored(v) for v in views)
        ended = self.counts["done"] + self.counts["failed"]
        share = (ended - restored + partial) / work if work > 0 else 1.0
        if share <= 0:
            return None
        longest = max((eta for v in views if v.phase in TRAINING
                       and (eta := v.eta(now)) is not None), default=0.0)  # fmt: skip
        return max(longest, (now - self.began) * (1 - share) / share)

    def run_ended(self, run_id: str, record: Any) -> None:
        with self.lock:
            view = self.runs.get(run_id)
            self.restored += _restored(view) if view is not None else 0.0
        super().run_ended(run_id, record)


class PlainProgress(PacedProgress):
    """Plain lines on ``stream``: a unit's start, the running runs every ``every`` seconds
    (the first round sooner), each end; each line with the sweep's count and time left."""

    def __init__(
        self,
        total: int,
        stream: TextIO | None = None,
        every: float | None = None,
        loggers: Sequence[Any] = (),
    ) -> None:
        super().__init__(total, loggers)
        self.stream = stream or sys.stderr
        self.every = progress_every() if every is None else every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ssilbench-progress", daemon=True)

    def start(self) -> None:
        self.began = time.time()
        self._thread.start()

    def _head(self, now: float) -> str:
        ended = self.counts["done"] + self.counts["failed"] + self.counts["skipped"]
        return f"{time.strftime('%H:%M:%S', time.localtime(now))} " \
               f"[{ended}/{self.total} eta {duration(self.sweep_eta(now))}] "  # fmt: skip

    def _write(self, body: str, now: float | None = None) -> None:
        head = self._head(now or time.time())
        self.stream.write(head + body[: WIDTH - len(head)] + "\n")
        self.stream.flush()

    def _room(self) -> int:
        return WIDTH - len(self._head(time.time()))

    def __call__(self, event: str, text: str) -> None:
        self.count(event)
        if event in ("done", "failed", "start"):
            self._write(f"{event}: {compact(text, self._room() - len(event) - 2)}")

    def round(self) -> None:
        """One line per running run, now, one for the runs preparing data beyond a few,
        one for the runs queued beyond a few, and one for the claimed runs that have said
        nothing yet."""
        now = time.time()
        with self.lock:
            views = sorted(self.runs.values(), key=lambda v: v.started)
        counted = {phase: [v for v in views if v.phase == phase]
                   for phase in ("preparing data", "queued")}  # fmt: skip
        grouped = {phase for phase, runs in counted.items() if len(runs) > GROUPED}
        drawn = [v for v in views if v.reported and v.phase not in grouped]
        room = self._room()
        for view in drawn:
            holder = self.holder_of(view.holder) if view.phase == "waiting" else ""
            self._write(fit(view.label, status_parts(view, now, holder), room), now)
        if "preparing data" in grouped:
            self._write(f"{len(counted['preparing data'])} runs preparing data", now)
        if "queued" in grouped:
            self._write(f"{len(counted['queued'])} runs queued behind another group of their "
                        "stacked unit", now)  # fmt: skip
        silent = sum(not view.reported for view in views)
        if silent:
            self._write(f"{silent} more claimed, not heard from yet", now)

    def _loop(self) -> None:
        wait = min(self.every, FIRST_ROUND)
        while not self._stop.wait(wait):
            self.round()
            wait = self.every

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        super().close()


class LiveProgress(PacedProgress):
    """A rich live display on stderr: the sweep's bar (its time left as the plain lines
    give it) and a row per running run."""

    def __init__(self, total: int, console: Any = None, loggers: Sequence[Any] = ()) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        super().__init__(total, loggers)
        self.console = console or Console(stderr=True)
        self.bar = Progress(
            TextColumn("[bold]sweep"),
            BarColumn(bar_width=20),
            MofNCompleteColumn(),
            TextColumn("[green]{task.fields[done]} done[/] · {task.fields[running]} running · "
                       "{task.fields[waiting]} waiting · [red]{task.fields[failed]} failed[/]"),
            TimeElapsedColumn(),
            TextColumn("eta {task.fields[eta]}"),
            console=self.console,
        )  # fmt: skip
        self.task = self.bar.add_task("", total=total, running=0, waiting=0, eta="?",
                                      **self.counts)  # fmt: skip
        self.live: Any = None

    def start(self) -> None:
        from rich.live import Live

        self.began = time.time()
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
            views = sorted((v for v in self.runs.values() if v.reported),
                           key=lambda v: v.started)  # fmt: skip
            waiting = len(self.runs) - len(views)
        self.bar.update(self.task, running=len(views), waiting=waiting,
                        eta=duration(self.sweep_eta(now)))  # fmt: skip
        for view in views[:MAX_ROWS]:
            share = f"{100 * view.step / view.total:.0f}%" if view.total else ""
            evaluation = (f"{_number(view.score)}@{short_count(view.eval_step)}"
                          if view.eval_step is not None else "-")  # fmt: skip
            holder = self.holder_of(view.holder) if view.phase == "waiting" else ""
            table.add_row(
                f"[dim]{view.label}[/]",
                phase_words(view, holder),
                f"{short_count(view.step)}/{short_count(view.total)} {share}",
                f"loss {_number(view.loss)}",
                f"eval {evaluation}",
                f"eta {eta_words(view, now) or duration(None)}",
            )
        if len(views) > MAX_ROWS:
            table.add_row(f"[dim]+{len(views) - MAX_ROWS} more running[/]", "", "", "", "", "")
        return Group(self.bar, table) if views else self.bar

    def __call__(self, event: str, text: str) -> None:
        if event in ("start", "claimed"):
            return
        self.count(event)
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
