"""A sweep file's study drawn from the results store: its figure (``ssilbench plot``) and
its section of a replication report (``ssilbench report``), with the names of the files
they are written to."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ssilbench.errors import UsageError, safe_file_name

if TYPE_CHECKING:
    from ssilbench.leaderboard.figures import Panel
    from ssilbench.plugins import Plugins
    from ssilbench.runner.sweepfile import SweepFile


def study_panels(plugins: Plugins, path: str, quick: bool) -> tuple[SweepFile, dict[str, str]]:
    """A sweep file, and the design id of each of its runs -> the panel it is drawn in
    (found without opening a dataset)."""
    from ssilbench.runner.sweepfile import load_sweep_file, panel_titles

    sweep_file = load_sweep_file(Path(path))
    return sweep_file, panel_titles(plugins, sweep_file, quick)


def load_study(
    plugins: Plugins, path: str, results: str, quick: bool, allow_empty: bool = False
) -> tuple[SweepFile, list[Panel]]:
    """A sweep file and the panels of its finished runs in the store at ``results``; no
    finished run is a UsageError unless ``allow_empty``."""
    from ssilbench.leaderboard.figures import collect
    from ssilbench.runner.results_db import ResultsStore

    sweep_file, titles = study_panels(plugins, path, quick)
    with ResultsStore.open_read_only(Path(results)) as store:
        records = [r for r in store.rows("done") if r.design_id in titles]
    if not records and not allow_empty:
        raise UsageError(
            f"No finished runs of {path} in {results}: run 'ssilbench run --sweep {path}"
            f"{' --quick' if quick else ''}' first (same --results)."
        )
    return sweep_file, collect(records, titles, sweep_file.metric, sweep_file.display)


def figure_name(sweep_file: SweepFile, quick: bool) -> str:
    """The file name (no suffix) of a study's figure."""
    return safe_file_name(sweep_file.name) + ("-quick" if quick else "")


def draw_study(sweep_file: SweepFile, panels: list[Panel], quick: bool, folder: Path) -> list[Path]:
    """Draw the study's figure into ``folder``; the files written (PNG, SVG)."""
    from ssilbench.leaderboard.figures import draw

    return draw(panels, sweep_file.title or sweep_file.name, sweep_file.metric,
                sweep_file.x_label, folder / figure_name(sweep_file, quick))  # fmt: skip


def plot_study(plugins: Plugins, path: str, results: str, quick: bool, folder: Path) -> list[Path]:
    """Draw one sweep file's figure from its finished runs; the files written."""
    sweep_file, panels = load_study(plugins, path, results, quick)
    return draw_study(sweep_file, panels, quick, folder)


def write_report(
    plugins: Plugins, paths: Sequence[str], results: str, quick: bool, out: str
) -> tuple[Path, Path]:
    """Write the replication report of the studies in ``paths`` to ``out`` (Markdown), with
    their figures in a ``figures`` folder beside it; (report, figures folder)."""
    from ssilbench.leaderboard.render import write_replacing
    from ssilbench.leaderboard.report import study_section

    target = Path(out)
    figures = target.parent / "figures"
    lines = [
        "# Replication report",
        "",
        "Generated from the results store by:",
        "",
        "```",
        "ssilbench report " + " ".join(f"--sweep {p}" for p in paths)
        + (" --quick" if quick else "") + f" --out {out}",
        "```",
        "",
    ]  # fmt: skip
    tally = {True: 0, False: 0, None: 0}
    for path in paths:
        sweep_file, panels = load_study(plugins, path, results, quick, allow_empty=True)
        command = f"ssilbench run --sweep {path}" + (" --quick" if quick else "")
        figure = None
        if panels:
            png, _ = draw_study(sweep_file, panels, quick, figures)
            figure = Path(os.path.relpath(png, target.parent))
        section, verdicts = study_section(sweep_file, Path(path), panels, figure, command)
        lines += section
        for v in verdicts:
            tally[v.held] += 1
    lines.insert(2, f"Claims held: {tally[True]}, not held: {tally[False]}, "
                    f"not checked: {tally[None]}.\n")  # fmt: skip
    write_replacing(target, "\n".join(lines), "Choose another --out path.")
    return target, figures
