"""``ssilbench status``: how far the sweeps writing to a results store have got."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ssilbench.cli.app import State
from ssilbench.cli.options import (
    blocks_option,
    quick_option,
    results_option,
    sweep_file_option,
)
from ssilbench.errors import UsageError

if TYPE_CHECKING:
    from collections.abc import Collection

    from ssilbench.plugins import Plugins
    from ssilbench.runs.records import RunRecord


@click.command()
@results_option
@sweep_file_option("Count remaining runs against this sweep file.")
@quick_option("With --sweep: its [quick] variant.")
@blocks_option()
@click.pass_obj
def status(state: State, results: str, sweep_file, quick, blocks) -> None:
    """Progress of the sweeps writing to a results store, from any machine that sees it:
    runs done, running (where, for how long), failed and to go, with an estimate of the
    time left."""
    from ssilbench.runs.store import ResultsStore
    from ssilbench.train.checkpoint import CHECKPOINTS

    # The sweep file's runs by setup id (all but the data): found without opening a
    # dataset, and only those a sweep of the file would skip.
    planned: dict[str, str] | None = None
    if sweep_file is not None:
        from ssilbench.planning.sweepfile import load_blocks, planned_setups

        planned = planned_setups(state.plugins, load_blocks(Path(sweep_file), blocks), quick)
    elif quick or blocks is not None:
        raise UsageError(f"{'--quick' if quick else '--blocks'} needs --sweep FILE.")
    with ResultsStore.open_read_only(Path(results)) as store:
        every = store.rows(None)
    rows = [r for r in every if planned is None or r.spec.setup_id in planned]
    # A sweep file's planned ids already hold the installed code; without one, the runs a
    # sweep here would not resume are found by comparing code fingerprints.
    other = other_code(state.plugins, rows) if planned is None else {}
    lines = progress_lines(rows, planned, time.time(), Path(results) / CHECKPOINTS, other)
    if planned is not None and (done_elsewhere := done_by_other_code(every, planned)):
        lines.insert(1, f"  {done_elsewhere} of the not started are recorded as done by other "
                        "code than is installed here (an earlier release or an edited "
                        "plugin): a report draws those; a sweep run here trains them again "
                        "under new run ids")  # fmt: skip
    for line in lines:
        click.echo(line)


def done_by_other_code(rows: list[RunRecord], planned: dict[str, str]) -> int:
    """How many of the sweep's ``planned`` runs (setup id -> design id) are not recorded
    under their setup id but are done as the same design by other code."""
    designs = set(planned.values())
    here = {planned[r.spec.setup_id] for r in rows if r.spec.setup_id in planned}
    return len({design for r in rows if r.status == "done"
                and (design := r.spec.design_id) in designs and design not in here})  # fmt: skip


def other_code(plugins: Plugins, rows: list[RunRecord]) -> dict[str, list[str]]:
    """Run id -> what differs (``code.maze``, ``spec version``) for each unfinished run that
    the plugins installed here would plan under another id: a sweep run here starts it
    afresh, so it is no longer to go. Plugins not installed here count as other code."""
    from ssilbench.runs.identity import plugin_code
    from ssilbench.runs.spec import SPEC_VERSION

    installed: dict[tuple, dict[str, str]] = {}
    found: dict[str, list[str]] = {}
    for r in rows:
        if r.status in ("done", "failed"):
            continue
        spec = r.spec
        key = (spec.method, spec.env.split(":", 1)[0], spec.config.get("arch"))
        if key not in installed:
            registries = (plugins.methods, plugins.environments, plugins.architectures)
            installed[key] = plugin_code([(registry, name) for registry, name
                                          in zip(registries, key, strict=True)
                                          if name in registry.entries])  # fmt: skip
        here = installed[key]
        differs = [f"code.{name}" for name, print_ in sorted(spec.code.items())
                   if here.get(name) != print_]  # fmt: skip
        if spec.version != SPEC_VERSION:
            differs.append("spec version")
        if differs:
            found[r.run_id] = differs
    return found


def progress_lines(
    rows: list[RunRecord],
    planned: Collection[str] | None,
    now: float,
    checkpoints: Path | None = None,
    other: dict[str, list[str]] | None = None,
) -> list[str]:
    """The status report of the store's ``rows`` (those of the ``planned`` setup ids when
    given): counts, the groups running now and the interrupted ones that saved checkpoints
    (with the steps of their last checkpoints in the folder ``checkpoints``: where a next
    sweep goes on from), and the time left at the last hour's rate. Interrupted runs in
    ``other`` (:func:`other_code`) are said apart and not counted as to go."""
    import socket

    from ssilbench.runs.records import is_stale
    from ssilbench.runs.store import STATUSES

    host = socket.gethostname()
    # Read the way the next sweep will: runs left by a process that is gone are interrupted.
    rows = [replace(r, status="interrupted") if is_stale(r, host) else r for r in rows]
    by = {s: [r for r in rows if r.status == s] for s in STATUSES}
    other = other or {}
    stale = [r for r in by["interrupted"] if r.run_id in other]
    to_go = (len(planned) - len(by["done"])) if planned is not None else (
        len(by["running"]) + len(by["interrupted"]) - len(stale))  # fmt: skip
    lines = [
        f"{len(by['done'])} done, {len(by['running'])} running, {len(by['failed'])} failed, "
        f"{len(by['interrupted'])} interrupted"
        + (f", {len(planned) - len(rows)} not started" if planned is not None else "")
    ]
    if stale:
        keys = sorted({key for r in stale for key in other[r.run_id]})
        verb = "differ" if len(keys) > 1 else "differs"
        lines.append(f"  {len(stale)} of the interrupted were recorded by other code than is "
                     f"installed here ({', '.join(keys)} {verb}): a sweep run here starts "
                     "them again under new run ids, so they are not counted as to go")  # fmt: skip
    groups: dict[tuple, list[RunRecord]] = {}
    for r in by["running"]:
        groups.setdefault((r.method_label, r.env_label, r.host, r.pid), []).append(r)
    for (method, env, where, pid), runs in sorted(groups.items(), key=lambda kv: kv[0][:2]):
        since = now - min(r.started_at or now for r in runs)
        lines.append(f"  running {len(runs):4d}  {method} on {env}  for {since:.0f} s "
                     f"({where}, pid {pid})")  # fmt: skip
        if checkpoints is not None and (saved := _saved(checkpoints, runs)):
            lines.append(f"           {saved}")
    stopped: dict[tuple, list[RunRecord]] = {}
    for r in by["interrupted"] if checkpoints is not None else ():
        stopped.setdefault((r.method_label, r.env_label), []).append(r)
    for (method, env), runs in sorted(stopped.items()):
        if saved := _saved(checkpoints, runs):
            lines.append(f"  interrupted {len(runs):4d}  {method} on {env}")
            lines.append(f"           {saved}")
    # The recent finishing rate covers any mix of stacking, workers and machines. It is
    # taken over the hour, or since the earliest of those runs started when that is later:
    # stacked runs finish in bursts, and a burst's own spacing is no rate.
    recent = [r for r in by["done"]
              if r.finished_at is not None and now - r.finished_at < 3600]  # fmt: skip
    if to_go > 0 and recent:
        began = min(r.finished_at if r.started_at is None else min(r.started_at, r.finished_at)
                    for r in recent)  # fmt: skip
        window = min(3600.0, now - began)
        if window > 0:
            rate = len(recent) / window
            runs = f"{to_go} run" + ("s" if to_go > 1 else "")
            lines.append(f"about {to_go / rate / 60:.0f} min to go: {runs} at the last "
                         f"hour's {rate * 60:.1f} runs/min")  # fmt: skip
    return lines


def _saved(checkpoints: Path, runs: list[RunRecord]) -> str:
    """Where the group's last checkpoints are, per stage: long runs show progress between
    their start and their finish. Empty when none of them has saved one."""
    from ssilbench.train.checkpoint import saved_steps

    by_stage: dict[str, list[int]] = {}
    saving = 0
    for r in runs:
        steps = saved_steps(checkpoints / r.run_id)
        saving += bool(steps)
        for stage, used in steps.items():
            by_stage.setdefault(stage, []).append(used)
    if not by_stage:
        return ""
    spans = [f"{stage} {min(v):,}" + (f"-{max(v):,}" if max(v) > min(v) else "")
             for stage, v in sorted(by_stage.items())]  # fmt: skip
    return f"last checkpoints: {', '.join(spans)} (steps; {saving} of {len(runs)} runs)"
