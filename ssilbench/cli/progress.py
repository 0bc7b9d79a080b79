"""The live progress bar of a sweep on stderr."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

ProgressCallback = Callable[[str, str], None]


@contextmanager
def sweep_progress(total: int) -> Iterator[ProgressCallback]:
    """A bar over ``total`` runs with done, running, failed and left counts; yields the
    ``on_progress(event, text)`` callback the sweep reports to."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True)
    columns = (
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[green]{task.fields[done]} done[/] · {task.fields[running]} running · "
                   "[red]{task.fields[failed]} failed[/] · {task.fields[left]} to go"),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
    )  # fmt: skip
    counts = {"done": 0, "running": 0, "failed": 0, "left": total}
    with Progress(*columns, console=console, transient=False) as progress:
        bar = progress.add_task("", total=total, **counts)

        def on_progress(event: str, text: str) -> None:
            # "start" names a unit (several runs when stacked, all of them on a pool).
            if event == "start":
                progress.update(bar, description=text)
                return
            if event == "claimed":
                counts["running"] += 1
            elif event in ("done", "failed"):
                counts[event] += 1
                counts["running"] = max(0, counts["running"] - 1)
                if event == "failed":
                    progress.console.print(f"[red]failed[/red] {text}")
            counts["left"] -= event in ("done", "failed", "skipped")
            if event != "claimed":
                progress.advance(bar)
            progress.update(bar, **counts)

        yield on_progress
        progress.update(bar, description="")
