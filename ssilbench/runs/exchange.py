"""Moving results between machines: a results store as JSON Lines, and merging such files.

The file's first line is a header (``format``, ``version``, the exporting ssilbench, the
number of runs); every other line is one run with every column of the store, the runs
sorted by run id. A file named ``*.gz`` is gzip-compressed. The same runs exported by the
same ssilbench give the same bytes (no export time in the header, no time or name in the
gzip header), so an export kept in a repository only changes when its runs do.

A run id is the hash of its resolved spec, so the same run exported from two stores has the
same id: merging keeps one copy, and two finished copies that disagree are reported as
conflicts (the copy already in the store stays).
"""

from __future__ import annotations

import gzip
import io
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import ssilbench
from ssilbench.errors import UsageError
from ssilbench.outputs import check_output, results_store, write_atomic
from ssilbench.runs.merge_check import check_run
from ssilbench.runs.records import RunRecord
from ssilbench.runs.store import ResultsStore

FORMAT = "ssilbench-results"
VERSION = 2
"""1: every column of the runs table. 2: a run line may also hold ``curves`` (the run's rows
of the table curves); a file without curves is written as version 1, byte for byte as
before, so that older ssilbench versions merge it."""
REQUIRED = ("run_id", "spec", "method", "method_label", "env", "env_label", "budget", "seed",
            "status")  # fmt: skip
# What makes two finished copies of a run the same result (provenance such as host, pid and
# times may differ between machines).
RESULT_COLUMNS = ("spec", "n_labeled", "score", "final_score", "max_score", "metrics",
                  "timeline", "stages")  # fmt: skip


def is_compressed(path: Path) -> bool:
    """Whether an export at ``path`` is (to be) gzip-compressed: its name ends in ``.gz``."""
    return Path(path).suffix == ".gz"


def export_results(
    store: ResultsStore, out: Path, statuses: tuple[str, ...] = ("done",), curves: bool = True
) -> int:
    """Write the runs with these statuses to ``out`` (atomically; gzip-compressed when its
    name ends in ``.gz``), sorted by run id; returns how many. ``curves=False`` leaves the
    training curves out (they are most of an export's size, and results and reports do not
    read them)."""
    rows = sorted((r for r in store.rows(None, curves=curves) if r.status in statuses),
                  key=lambda r: r.run_id)  # fmt: skip
    lines = [{**row.to_row(), **({"curves": row.curves} if row.curves else {})} for row in rows]
    version = VERSION if any("curves" in line for line in lines) else 1
    header = {"format": FORMAT, "version": version, "ssilbench": ssilbench.__version__,
              "runs": len(rows)}  # fmt: skip
    text = "".join(json.dumps(line, sort_keys=True) + "\n"
                   for line in [header, *lines])  # fmt: skip
    data = text.encode("utf-8")
    out = Path(out)
    if is_compressed(out):
        buffer = io.BytesIO()
        # mtime 0 and no file name: the gzip header would otherwise hold the time and name.
        with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0) as f:
            f.write(data)
        data = buffer.getvalue()
    # Checked against this store even when no command guards it (a library call).
    check_output(out, results_store(store.directory))
    write_atomic(out, data, "Choose another --out path.")
    return len(rows)


def _text(path: Path) -> str:
    """The text of an export (decompressed when its name ends in ``.gz``)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist.") from None
    except OSError as exc:
        raise UsageError(f"Cannot read {path}: {exc.strerror or exc}.") from None
    if is_compressed(path):
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:  # not gzip, truncated, corrupted
            reason = "it ends early" if isinstance(exc, EOFError) else str(exc)
            raise UsageError(
                f"{path} is not a readable gzip file ({reason}): export it again with "
                "'ssilbench results export'."
            ) from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"Cannot read {path}: {exc}.") from None


def read_export(path: Path) -> list[RunRecord]:
    """Every run of an exported file (gzip-compressed when its name ends in ``.gz``),
    checked; a problem names the file and the line."""
    path = Path(path)
    lines = _text(path).splitlines()
    if not lines:
        raise UsageError(f"{path} is empty; expected a file written by 'ssilbench results export'.")
    try:
        header = json.loads(lines[0])
    except (ValueError, RecursionError):
        header = None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise UsageError(
            f"{path}, line 1: not an ssilbench results export (no '{FORMAT}' header); write one "
            "with 'ssilbench results export'."
        )
    version = header.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise UsageError(
            f"{path} was written by ssilbench {header.get('ssilbench', '?')} in results format "
            f"version {version}; this ssilbench ({ssilbench.__version__}) reads up to version "
            f"{VERSION}. Upgrade ssilbench to merge it."
        )
    runs = []
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{path}, line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{where}: not valid JSON ({exc.msg}).") from None
        except (ValueError, RecursionError) as exc:  # an integer of 4300+ digits, deep nesting
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise UsageError(f"{where}: not valid JSON ({reason}).") from None
        if not isinstance(row, dict):
            raise UsageError(f"{where}: a {type(row).__name__}, not a run (a JSON object).")
        missing = [k for k in REQUIRED if row.get(k) is None]
        if missing:
            raise UsageError(f"{where}: a run without {', '.join(missing)}.")
        runs.append(check_run(row, where))
    return runs


@dataclass
class MergeSummary:
    added: int = 0
    replaced: int = 0  # a finished copy took the place of an unfinished one
    identical: int = 0
    kept: int = 0  # the store's copy was finished (or is running here) and the incoming one not
    conflicts: list[str] = field(default_factory=list)
    unfinished: int = 0  # runs written 'interrupted' (received 'running' or 'interrupted')


def same_result(a: RunRecord, b: RunRecord) -> bool:
    """Whether two finished copies of a run hold the same result (see RESULT_COLUMNS)."""
    # Compared as they would be exported, so that the spec is the one recorded.
    mine, theirs = a.to_row(), b.to_row()
    return all(
        json.dumps(mine[k], sort_keys=True) == json.dumps(theirs[k], sort_keys=True)
        for k in RESULT_COLUMNS
    )


def merge_results(
    store: ResultsStore, runs: list[RunRecord], source: str, prefer: str = "store"
) -> MergeSummary:
    """Merge runs into the store in one transaction (all or nothing)."""
    return merge_files(store, [(source, runs)], prefer)[0]


def merge_files(
    store: ResultsStore, batches: list[tuple[str, list[RunRecord]]], prefer: str = "store"
) -> list[MergeSummary]:
    """Merge the runs of several files (name, runs read by :func:`read_export`), in order,
    in one transaction: all of them or nothing. One summary per file. Of two finished
    copies of a run that disagree (a conflict), ``prefer="store"`` keeps the one already in
    the store, ``"incoming"`` the file's (a later file's over an earlier one's)."""
    summaries = []
    existing = {r.run_id: r for r in store.rows(None)}
    with_curves = set(store.curves())
    writes: dict[str, RunRecord] = {}
    curves: dict[str, list] = {}  # curves received for a run the store holds without them
    for source, runs in batches:
        summary = MergeSummary()
        for run in runs:
            mine = existing.get(run.run_id)
            if _merge_one(summary, mine, run, source, prefer):
                if mine is not None and mine.status == "done" and run.curves is None:
                    run = run.with_curves([])  # the curves held were the replaced copy's
                writes[run.run_id] = existing[run.run_id] = run
                summary.unfinished += run.status == "interrupted"
                if run.curves:
                    with_curves.add(run.run_id)
            elif (
                run.curves
                and run.run_id not in with_curves
                and same_result(existing[run.run_id], run)
            ):
                # The same result, but only the received copy has its curves: they join it.
                curves[run.run_id] = run.curves
                with_curves.add(run.run_id)
        summaries.append(summary)
    store.put_rows(list(writes.values()), curves)
    return summaries


def _merge_one(
    summary: MergeSummary, mine: RunRecord | None, run: RunRecord, source: str, prefer: str
) -> bool:
    """Count ``run`` in ``summary``; whether it is to be written."""
    if mine is None:
        summary.added += 1
        return True
    if mine.status == "done" and run.status == "done":
        if same_result(mine, run):
            summary.identical += 1
            return False
        summary.conflicts.append(
            f"{run.method_label} on {run.env_label}, N_L={run.budget}, seed "
            f"{run.seed} (run {run.run_id[:12]}): score {mine.score} here, "
            f"{run.score} in {source}"
        )
        return prefer == "incoming"
    # A finished copy here stays, and so does a claim of a sweep on this store (running):
    # an unfinished copy from elsewhere would make another sweep train the run again.
    if mine.status == "done" or (mine.status == "running" and run.status != "done"):
        summary.kept += 1
        return False
    summary.replaced += 1
    return True
