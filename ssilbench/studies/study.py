"""A sweep file's study drawn from the results store: its figure (``ssilbench plot``) and
its section of a replication report (``ssilbench report``), with the names of the files
they are written to."""

from __future__ import annotations

import json
import math
import os
import shlex
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ssilbench.errors import UsageError, safe_file_name

if TYPE_CHECKING:
    from ssilbench.planning.sweepfile import PanelCell, SweepFile
    from ssilbench.plugins import Plugins
    from ssilbench.runs.records import RunRecord
    from ssilbench.studies.figures import Panel


def study_panels(
    plugins: Plugins, path: str, quick: bool
) -> tuple[SweepFile, dict[str, PanelCell]]:
    """A sweep file, and the design id of each of its runs -> the cell it is drawn in
    (found without opening a dataset)."""
    from ssilbench.planning.sweepfile import load_sweep_file, panel_cells

    sweep_file = load_sweep_file(Path(path))
    return sweep_file, panel_cells(plugins, sweep_file, quick)


def shown(path: str | Path) -> str:
    """A path as a report prints it: relative to the working folder when it is under it (a
    report must not depend on where the checkout lies), with '/' separators."""
    p = Path(path)
    if p.is_absolute():
        with suppress(ValueError):
            p = p.relative_to(Path.cwd())
    return p.as_posix()


@dataclass(frozen=True)
class RunSource:
    """Where a report's runs come from: a results store (``results``) or the files of
    ``ssilbench results export`` (``exports``); exactly one of the two."""

    results: str | None = None
    exports: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.results is not None and self.exports:
            raise UsageError(
                "Give the runs either as a results store (--results DIR) or as results "
                "exports (--from FILE), not both."
            )
        if self.results is None and not self.exports:
            raise UsageError(
                "Say where the runs are: --results DIR (a results store) or --from FILE (a "
                "file of 'ssilbench results export'; repeat --from for several)."
            )

    def kind(self) -> str:
        if self.results is not None:
            return "the results store"
        return "the results export" + ("s" if len(self.exports) > 1 else "")

    def words(self) -> str:
        names = [self.results] if self.results is not None else self.exports
        return f"{self.kind()} {', '.join(shown(f) for f in names)}"

    def flags(self) -> list[str]:
        if self.results is not None:
            return ["--results", shown(self.results)]
        return [arg for f in self.exports for arg in ("--from", shown(f))]

    def records(self) -> list[RunRecord]:
        """The finished runs. Exports may overlap (a run is kept once); two finished copies
        of a run with different results are refused, as a merge would report them."""
        if self.results is not None:
            from ssilbench.runs.store import ResultsStore

            with ResultsStore.open_read_only(Path(self.results)) as store:
                return store.rows("done")
        from ssilbench.runs.exchange import read_export, same_result

        runs: dict[str, tuple[str, RunRecord]] = {}
        for name in self.exports:
            for run in read_export(Path(name)):
                if run.status != "done":
                    continue
                if run.run_id not in runs:
                    runs[run.run_id] = (name, run)
                elif not same_result(runs[run.run_id][1], run):
                    raise UsageError(
                        f"{name} and {runs[run.run_id][0]} hold different results of one run "
                        f"({run.method_label} on {run.env_label}, N_L={run.budget}, seed "
                        f"{run.seed}, run {run.run_id[:12]}): 'ssilbench results merge' both "
                        "into a store to see the conflict, and export the one to keep."
                    )
        return [run for _, run in runs.values()]


def study_runs(
    plugins: Plugins, path: str, quick: bool, records: list[RunRecord]
) -> tuple[SweepFile, dict[str, PanelCell], list[RunRecord]]:
    """A sweep file, its panel cells (see :func:`study_panels`) and those of ``records``
    that are its runs, in the order of its plan (block, method, environment, budget, seed),
    whatever order the records came in: a report from a store and one from its export are
    the same. Records are matched by design id, so runs recorded by an earlier release,
    other plugin code or other data are found too; of the runs of one design, the one that
    finished last is drawn."""
    sweep_file, cells = study_panels(plugins, path, quick)
    order = {design: i for i, design in enumerate(cells)}
    latest: dict[str, RunRecord] = {}
    for r in records:
        if r.design_id in order and ((held := latest.get(r.design_id)) is None or _later(r, held)):
            latest[r.design_id] = r
    mine = sorted(latest.values(), key=lambda r: (order[r.design_id], r.run_id))
    return sweep_file, cells, mine


def _later(record: RunRecord, other: RunRecord) -> bool:
    """Whether ``record`` finished after ``other`` (ties: the larger run id, so that the
    choice does not depend on the records' order)."""
    return ((record.finished_at or 0.0), record.run_id) > ((other.finished_at or 0.0),
                                                            other.run_id)  # fmt: skip


def load_study(
    plugins: Plugins, path: str, results: str, quick: bool, allow_empty: bool = False
) -> tuple[SweepFile, list[Panel]]:
    """A sweep file and the panels of its finished runs in the store at ``results``; no
    finished run is a UsageError unless ``allow_empty``."""
    from ssilbench.studies.figures import collect

    records = RunSource(results=results).records()
    sweep_file, cells, runs = study_runs(plugins, path, quick, records)
    if not runs and not allow_empty:
        raise UsageError(
            f"No finished runs of {path} in {results}: run 'ssilbench run --sweep {path}"
            f"{' --quick' if quick else ''}' first (same --results)."
        )
    return sweep_file, collect(runs, cells, sweep_file.metric, sweep_file.display)


def _seconds(value: float) -> str:
    text = f"{value:,.0f} s" if value >= 10 else f"{value:.1f} s"
    return text + (f" ({value / 3600:.1f} h)" if value >= 3600 else "")


def _counted(groups: dict[str, int]) -> str:
    return ", ".join(f"{name} ({count} run{'s' if count != 1 else ''})"
                     for name, count in groups.items())  # fmt: skip


def provenance(sweep_file: SweepFile, quick: bool, runs: list[RunRecord]) -> list[str]:
    """How a study's runs were made, from what the runs recorded: the protocol, the code
    revision(s), the machine(s) and the wall time."""
    from ssilbench.leaderboard.render import md_escape

    if quick and sweep_file.quick is not None:
        changes = sweep_file.quick.model_dump(exclude_none=True)
        settings = ", ".join(f"{k} = {json.dumps(v, sort_keys=True)}" for k, v in changes.items())
        lines = [f"Protocol: the fast one, the file's [quick] overrides ({settings}) of its "
                 f"protocol '{sweep_file.protocol}'."]  # fmt: skip
    else:
        lines = [f"Protocol: {sweep_file.protocol}."]
    if not runs:
        return lines
    # Revisions in the order they were first used; runs without a start time come last.
    by_start = sorted(runs, key=lambda r: (r.started_at is None, r.started_at or 0.0, r.run_id))
    revisions: dict[str, int] = {}
    machines: dict[str, list[RunRecord]] = {}
    for r in by_start:
        git = (r.versions or {}).get("git")
        revision = f"git {md_escape(str(git))}" if git else "not recorded"
        revisions[revision] = revisions.get(revision, 0) + 1
        machine = (r.device or "device not recorded") + (f" on host {r.host}" if r.host else "")
        machines.setdefault(md_escape(machine), []).append(r)  # recorded text, as Markdown
    lines.append(f"Revision: {_counted(revisions)}.")
    lines.append(f"Machine: {_counted({m: len(rs) for m, rs in machines.items()})}.")
    if len(machines) == 1:
        wall = _wall_time(runs)
    else:
        # Times of different machines neither add up nor make one span: one figure each.
        wall = "by machine: " + "; ".join(f"{m}: {_wall_time(rs)}" for m, rs in machines.items())
    lines.append(f"Wall time: {wall}." + _resumed(runs))
    return lines


def _wall_time(runs: list[RunRecord]) -> str:
    """The runs' summed durations, the wall time with at least one of them in progress, and
    their span, from the first start to the last finish. A study run over several sittings
    (days apart, or a GPU lent now and then) has a span that is mostly the gaps between
    them; the time in progress leaves those out."""
    durations = [r.wall_time for r in runs if r.wall_time is not None]
    starts = [r.started_at for r in runs if r.started_at is not None]
    ends = [r.finished_at for r in runs if r.finished_at is not None]
    wall = (f"{_seconds(math.fsum(durations))} summed over the durations of "
            + (f"{len(durations)} of the {len(runs)} runs (the others recorded none)"
               if len(durations) < len(runs) else f"the {len(runs)} runs"))  # fmt: skip
    if starts and ends:
        busy = in_progress([(r.started_at, r.finished_at) for r in runs
                            if r.started_at is not None and r.finished_at is not None])  # fmt: skip
        wall += (f"; {_seconds(busy)} with at least one run in progress, within "
                 f"{_seconds(max(ends) - min(starts))} from the first start to the last "
                 "finish")  # fmt: skip
    return wall


def in_progress(intervals: list[tuple[float, float]]) -> float:
    """The length of the union of the (start, finish) ``intervals``: the wall time during
    which at least one of them was in progress."""
    total, end = 0.0, -math.inf
    for start, finish in sorted(intervals):
        if finish <= max(start, end):  # inside what is counted, or not an interval
            continue
        total += finish - max(start, end)
        end = finish
    return total


def _resumed(runs: list[RunRecord]) -> str:
    """What the durations of runs resumed from a checkpoint count (empty when none did)."""
    counted = uncounted = 0
    for r in runs:
        resumed = [s for s in (r.stages or {}).values()
                   if isinstance(s, dict) and "resumed_from" in s]  # fmt: skip
        if resumed and all("resumed_seconds" in s for s in resumed):
            counted += 1
        elif resumed:  # made before checkpoints recorded the time spent
            uncounted += 1
    text = ""
    if counted:
        text += (f" {counted} of the runs resumed from a checkpoint; their durations include "
                 "the earlier attempts up to that checkpoint.")  # fmt: skip
    if uncounted:
        text += (f" {uncounted} of the runs resumed from a checkpoint that did not record the "
                 "time spent before it; their durations are only the attempt that finished "
                 "them.")  # fmt: skip
    return text + _moved(runs)


def _moved(runs: list[RunRecord]) -> str:
    """The runs that began on another device than the one that finished them (and that
    their record names), with those devices; empty when none did."""
    from ssilbench.leaderboard.render import md_escape

    began: dict[str, int] = {}
    moved = 0
    for r in runs:
        earlier = {str(d) for s in (r.stages or {}).values() if isinstance(s, dict)
                   for d in s.get("resumed_devices") or () if d != r.device}  # fmt: skip
        moved += bool(earlier)
        for device in sorted(earlier):
            began[md_escape(device)] = began.get(md_escape(device), 0) + 1
    if not moved:
        return ""
    return (
        f" {moved} of the runs began on another device ({_counted(began)}) and went on "
        "from its checkpoint on the machine they are counted under."
    )


def figure_name(sweep_file: SweepFile, quick: bool) -> str:
    """The file name (no suffix) of a study's figure."""
    return safe_file_name(sweep_file.name) + ("-quick" if quick else "")


def draw_study(sweep_file: SweepFile, panels: list[Panel], quick: bool, folder: Path) -> list[Path]:
    """Draw the study's figure into ``folder``; the files written (PNG, SVG)."""
    from ssilbench.studies.figures import draw

    return draw(panels, sweep_file.title or sweep_file.name, sweep_file.metric,
                sweep_file.x_label, folder / figure_name(sweep_file, quick))  # fmt: skip


def plot_study(plugins: Plugins, path: str, results: str, quick: bool, folder: Path) -> list[Path]:
    """Draw one sweep file's figure from its finished runs; the files written."""
    sweep_file, panels = load_study(plugins, path, results, quick)
    return draw_study(sweep_file, panels, quick, folder)


def _tallied(tally: dict[str, int]) -> str:
    from ssilbench.studies.report import OUTCOMES

    return ", ".join(f"{name}: {tally[name]}" for name in OUTCOMES)


def write_report(
    plugins: Plugins, paths: Sequence[str], source: RunSource, quick: bool, out: str
) -> tuple[Path, Path]:
    """Write the replication report of the studies in ``paths`` to ``out`` (Markdown), with
    their figures in a ``figures`` folder beside it; (report, figures folder). The report
    depends only on the sweep files and the runs: not on the time, nor on where it is."""
    from ssilbench.leaderboard.render import write_replacing
    from ssilbench.studies.figures import collect
    from ssilbench.studies.report import OUTCOMES, RULES, study_section

    target = Path(out)
    figures = target.parent / "figures"
    records = source.records()
    command = ["ssilbench", "report", *(a for p in paths for a in ("--sweep", shown(p))),
               *(["--quick"] if quick else []), *source.flags(), "--out", shown(out)]  # fmt: skip
    lines = [
        "# Replication report",
        "",
        f"Generated from {source.words()} by:",
        "",
        "```",
        shlex.join(command),
        "```",
        "",
        RULES,
        "",
    ]
    # The paper's claims are counted apart from those judged on ssilbench's own variants.
    tally = dict.fromkeys(OUTCOMES, 0)
    variant_tally = dict.fromkeys(OUTCOMES, 0)
    variants: list[str] = []
    for path in paths:
        sweep_file, cells, runs = study_runs(plugins, path, quick, records)
        panels = collect(runs, cells, sweep_file.metric, sweep_file.display)
        run_command = shlex.join(["ssilbench", "run", "--sweep", shown(path),
                                  *(["--quick"] if quick else [])])  # fmt: skip
        figure = None
        if panels:
            png, _ = draw_study(sweep_file, panels, quick, figures)
            figure = Path(os.path.relpath(png, target.parent))
        section, verdicts = study_section(
            sweep_file, shown(path), panels, figure, run_command,
            provenance(sweep_file, quick, runs), source.kind(),
        )  # fmt: skip
        lines += section
        if sweep_file.variant:
            variants.append(sweep_file.name)
        for v in verdicts:
            (variant_tally if sweep_file.variant else tally)[v.outcome] += 1
    headline = f"The paper's claims — {_tallied(tally)}.\n"
    if variants:
        headline += (f"\nClaims judged on ssilbench's own variants ({', '.join(variants)}), "
                     f"counted apart — {_tallied(variant_tally)}.\n")  # fmt: skip
    lines.insert(2, headline)
    write_replacing(target, "\n".join(lines), "Choose another --out path.")
    return target, figures
