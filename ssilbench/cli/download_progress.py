"""Progress of ``ssilbench data download``: a rich bar per file in a terminal, plain lines in
a log file or a pipe, nothing with ``--quiet`` (each a Reporter of
:mod:`ssilbench.data.download_fetch`)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from ssilbench.data.download_fetch import Reporter, human_size


class PlainReporter:
    """Progress as plain lines (a log file, a pipe, SLURM): one at the start, one every
    ``every`` seconds while bytes arrive, one at the end."""

    def __init__(self, echo: Callable[[str], None], every: float = 10.0) -> None:
        self.echo = echo
        self.every = every
        self.name, self.total, self.done = "", None, 0
        self._start = self._last = 0.0
        self._first = 0

    def line(self, text: str) -> None:
        self.echo(text)

    def start(self, name: str, total: int | None, done: int) -> None:
        self.name, self.total, self.done, self._first = name, total, done, done
        self._start = self._last = time.monotonic()
        of = f" {human_size(total)}" if total is not None else " (size not announced)"
        at = f" from {human_size(done)}" if done else ""
        self.echo(f"{name}: downloading{of}{at}")

    def _status(self) -> str:
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = (self.done - self._first) / elapsed
        if self.total:
            return (f"{human_size(self.done)} / {human_size(self.total)} "
                    f"({100 * self.done / self.total:.0f}%), {human_size(rate)}/s")  # fmt: skip
        return f"{human_size(self.done)}, {human_size(rate)}/s"

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self.echo(f"{self.name}: {self._status()}")

    def restart(self, done: int) -> None:
        self.done = self._first = done

    def finish(self, ok: bool = True) -> None:
        if ok:
            elapsed = time.monotonic() - self._start
            self.echo(f"{self.name}: {self._status()}, done in {elapsed:.0f} s")


class RichReporter:
    """A rich progress bar per file on stderr (a terminal); each finished bar stays."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.progress: Any = None
        self.task: Any = None

    def line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def start(self, name: str, total: int | None, done: int) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        # One Progress per file, so that a finished file's bar is printed once and stays.
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
            TransferSpeedColumn(), TimeRemainingColumn(), console=self.console,
        )  # fmt: skip
        self.progress.start()
        self.task = self.progress.add_task(name, total=total, completed=done)

    def advance(self, n: int) -> None:
        self.progress.advance(self.task, n)

    def restart(self, done: int) -> None:
        self.progress.update(self.task, completed=done)

    def finish(self, ok: bool = True) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class SilentReporter:
    """No progress at all (``--quiet``); errors still stop the command."""

    def line(self, text: str) -> None:
        pass

    def start(self, name: str, total: int | None, done: int) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def restart(self, done: int) -> None:
        pass

    def finish(self, ok: bool = True) -> None:
        pass


def reporter_for(quiet: bool, echo: Callable[[str], None]) -> Reporter:
    """A rich bar in a terminal, plain lines otherwise, nothing with ``--quiet``."""
    if quiet:
        return SilentReporter()
    if sys.stderr.isatty():
        return RichReporter()
    return PlainReporter(echo)
