"""The results store: one embedded SQLite database (WAL mode), one row per run id.

A run is marked ``running`` when it starts and becomes ``done`` or ``failed`` in one
transaction when it ends, so a killed sweep leaves finished runs intact and unfinished ones
visibly ``running``; the next sweep marks those ``interrupted`` and runs them again.

Commands that only read open it with :meth:`ResultsStore.open_read_only`, which changes no
file; the schema, and the checks that a file is an ssilbench store, are in
:mod:`ssilbench.runs.store_file`.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ssilbench.errors import ResultsStoreError
from ssilbench.runs.records import RunOutcome, RunRecord, is_stale, left_behind, process_alive
from ssilbench.runs.spec import SPEC_VERSION, RunSpec
from ssilbench.runs.store_file import (
    COLUMNS,
    DB_NAME,
    JSON_COLUMNS,
    SCHEMA,
    SCHEMA_VERSION,
    STATUSES,
    check_store,
    open_read_only,
)

__all__ = ["COLUMNS", "DB_NAME", "JSON_COLUMNS", "SCHEMA_VERSION", "STATUSES", "ResultsStore",
           "RunOutcome", "RunRecord", "ensure_writable", "is_stale", "process_alive",
           "read_statuses"]  # fmt: skip


def ensure_writable(directory: Path) -> Path:
    """Create the results directory and prove it is writable, or say what to do."""
    directory = Path(directory).expanduser()
    hint = "Pass a writable directory with --results DIR (or set SSILBENCH_RESULTS)."
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ResultsStoreError(
            f"Results path {directory} exists and is not a directory. {hint}"
        ) from None
    except OSError as exc:
        raise ResultsStoreError(
            f"Cannot create results directory {directory}: {exc.strerror}. {hint}"
        ) from None
    probe = directory / f".write-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ResultsStoreError(
            f"Results directory {directory} is not writable: {exc.strerror}. {hint}"
        ) from None
    return directory


def _read_rows(directory: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """The rows of a query on the store in ``directory``, read without writing anything (no
    store there, or an empty file that a sweep would make a store of: none)."""
    path = Path(directory).expanduser() / DB_NAME
    if not path.is_file() or path.stat().st_size == 0:
        return []
    db = open_read_only(path)
    try:
        return db.execute(sql, params).fetchall()
    except sqlite3.DatabaseError as exc:
        raise ResultsStoreError(f"Cannot read the results store {path}: {exc}.") from None
    finally:
        db.close()


def read_statuses(directory: Path) -> dict[str, str]:
    """Run id -> status of the store in ``directory``, read without writing anything."""
    return dict(_read_rows(directory, "SELECT run_id, status FROM runs"))


def read_designs(directory: Path, statuses: tuple[str, ...]) -> set[str]:
    """The setup ids (:attr:`RunSpec.setup_id`: all but the data) of the store's runs in
    one of ``statuses``, read without writing anything; a spec that no longer parses is left
    out. A dry run matches by setup the runs whose datasets are not built yet."""
    marks = ", ".join("?" * len(statuses))
    docs = _read_rows(directory, f"SELECT spec FROM runs WHERE status IN ({marks})", statuses)
    designs = set()
    for (doc,) in docs:
        try:
            designs.add(RunSpec.model_validate(json.loads(doc)).setup_id)
        except (ValueError, TypeError):
            continue
    return designs


class ResultsStore:
    """Access to ``DIR/results.sqlite``. Use as a context manager or call :meth:`close`."""

    def __init__(self, directory: Path, create: bool = True, read_only: bool = False) -> None:
        """Open (``create``: make) the store in ``directory`` for writing; ``read_only``
        (see :meth:`open_read_only`) opens an existing one without writing a byte. A file
        that is not an ssilbench store is refused before anything is written to it."""
        self.directory = Path(directory).expanduser()
        self.path = self.directory / DB_NAME
        self.read_only = read_only
        if create and not read_only:
            ensure_writable(self.directory)
        elif not self.path.is_file():
            raise ResultsStoreError(
                f"No results store at {self.path}. Run a sweep first (ssilbench run ...) or pass "
                "the directory it used with --results DIR."
            )
        if read_only:
            self.db = open_read_only(self.path)
            self.db.row_factory = sqlite3.Row
            return
        if self.path.is_file():
            check_store(self.path)  # a foreign file is refused untouched
        try:
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
            self.db.row_factory = sqlite3.Row
            found = self.db.execute("PRAGMA user_version").fetchone()[0]
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
            if found < SCHEMA_VERSION:
                self.db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except sqlite3.DatabaseError as exc:
            raise ResultsStoreError(
                f"Cannot open the results store {self.path}: {exc}. Is it an ssilbench results "
                "directory? Pass another with --results DIR."
            ) from None

    @classmethod
    def open_read_only(cls, directory: Path) -> ResultsStore:
        """The existing store in ``directory``, for reading only: no journal mode set, no
        schema created, no file created or changed (a store in a read-only directory reads).
        What every command that only reads the store uses."""
        return cls(directory, create=False, read_only=True)

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """All or nothing; a store that cannot be written (disk full, read-only, locked for
        too long) is a ResultsStoreError that says so, and no row is half-written."""
        try:
            self.db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise self._write_error(exc) from None
        try:
            yield self.db
            self.db.execute("COMMIT")
        except BaseException as exc:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            if isinstance(exc, sqlite3.OperationalError):
                raise self._write_error(exc) from None
            raise

    def _write_error(self, exc: sqlite3.OperationalError) -> ResultsStoreError:
        text = str(exc)
        hint = {
            "database or disk is full": "Free disk space, or pass another --results DIR",
            "attempt to write a readonly database": "Make it writable, or pass another "
            "--results DIR",
            "database is locked": "Another process holds it; try again, or pass another "
            "--results DIR",
        }.get(text, "Pass another --results DIR")
        return ResultsStoreError(f"Cannot write the results store {self.path}: {text}. {hint}; "
                                 "runs recorded before are intact.")  # fmt: skip

    def status(self, run_id: str) -> str | None:
        row = self.db.execute("SELECT status FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return row[0] if row else None

    def statuses(self) -> dict[str, str]:
        return {run_id: status for run_id, status in self.db.execute(
            "SELECT run_id, status FROM runs")}  # fmt: skip

    def mark_stale_interrupted(self) -> int:
        """Runs left 'running' by a process of this host that no longer exists.

        Runs of other hosts sharing the store may still be alive and are left as they are.
        """
        host = socket.gethostname()
        stale = [
            run_id
            for run_id, status, run_host, pid in self.db.execute(
                "SELECT run_id, status, host, pid FROM runs WHERE status = 'running'"
            )
            if left_behind(status, run_host, pid, host)
        ]
        with self.transaction() as db:
            db.executemany(
                "UPDATE runs SET status = 'interrupted' WHERE run_id = ? AND status = 'running'",
                [(rid,) for rid in stale],
            )
        return len(stale)

    def mark_interrupted(self, run_ids: list[str]) -> int:
        """Runs of this sweep that will not finish in it (a worker died)."""
        with self.transaction() as db:
            db.executemany(
                "UPDATE runs SET status = 'interrupted' WHERE run_id = ? AND status = 'running'",
                [(rid,) for rid in run_ids],
            )
        return len(run_ids)

    def release(self, run_ids: list[str]) -> None:
        """Give back runs this process claimed but never started (the executor refused
        them): a run claimed for the first time leaves no row, a retried one reads
        ``interrupted``."""
        host, pid = socket.gethostname(), os.getpid()
        mine = "run_id = ? AND status = 'running' AND host = ? AND pid = ?"
        with self.transaction() as db:
            for run_id in run_ids:
                db.execute(f"DELETE FROM runs WHERE {mine} AND attempts = 1",
                           (run_id, host, pid))  # fmt: skip
                db.execute(f"UPDATE runs SET status = 'interrupted' WHERE {mine}",
                           (run_id, host, pid))  # fmt: skip

    def start(
        self,
        spec: RunSpec,
        method_label: str,
        env_label: str,
        device: str,
        versions: dict,
        retry_failed: bool = True,
    ) -> bool:
        """Claim the run for this process and mark it ``running``; False (and nothing
        written) when it is done, failed (unless ``retry_failed``), or being run by another
        live process, so that two sweeps over one store never train a run twice."""
        host, pid = socket.gethostname(), os.getpid()
        with self.transaction() as db:
            row = db.execute(
                "SELECT status, host, pid FROM runs WHERE run_id = ?", (spec.run_id,)
            ).fetchone()
            if row is not None:
                status, run_host, run_pid = row
                elsewhere = run_host != host or (run_pid != pid and process_alive(run_pid))
                if (
                    status == "done"
                    or (status == "failed" and not retry_failed)
                    or (status == "running" and elsewhere)
                ):
                    return False
            db.execute(
                """
                INSERT INTO runs (run_id, spec, method, method_label, env, env_label, budget, seed,
                                  status, attempts, started_at, device, versions, host, pid)
                VALUES (?, ?, ?, ?, ?, ?, ?, ?, 'running', 1, ?, ?, ?, ?, ?)
                ON CONFLICT (run_id) DO UPDATE SET
                    status = 'running', attempts = attempts + 1, started_at = excluded.started_at,
                    device = excluded.device, versions = excluded.versions, host = excluded.host,
                    pid = excluded.pid, error = NULL, finished_at = NULL, wall_time = NULL
                """,
                (
                    spec.run_id,
                    spec.canonical_json(),
                    spec.method,
                    method_label,
                    spec.env,
                    env_label,
                    spec.budget,
                    spec.seed,
                    time.time(),
                    device,
                    json.dumps(versions, sort_keys=True),
                    host,
                    pid,
                ),
            )
        return True

    def finish(self, run_id: str, outcome: RunOutcome, wall_time: float) -> None:
        with self.transaction() as db:
            db.execute(
                """
                UPDATE runs SET status = 'done', finished_at = ?, wall_time = ?, n_labeled = ?,
                    score = ?, final_score = ?, max_score = ?, report = ?, normaliser = ?,
                    timeline = ?, metrics = ?, stages = ?, error = NULL
                WHERE run_id = ?
                """,
                (
                    time.time(),
                    wall_time,
                    outcome.n_labeled,
                    outcome.score,
                    outcome.final_score,
                    outcome.max_score,
                    outcome.report,
                    json.dumps(outcome.normaliser),
                    json.dumps(outcome.timeline),
                    json.dumps(outcome.metrics),
                    json.dumps(outcome.stages),
                    run_id,
                ),
            )
            self._write_curves(db, run_id, outcome.curves)

    def _write_curves(self, db: sqlite3.Connection, run_id: str, curves: list[dict]) -> None:
        """Replace the run's curves with ``curves`` (inside the caller's transaction)."""
        db.execute("DELETE FROM curves WHERE run_id = ?", (run_id,))
        db.executemany(
            "INSERT INTO curves (run_id, stage, name, steps, vals) VALUES (?, ?, ?, ?, ?)",
            [(run_id, c["stage"], c["name"], json.dumps(c["steps"]), json.dumps(c["values"]))
             for c in curves],
        )  # fmt: skip

    def has_curves_table(self) -> bool:
        """Whether the store has the table ``curves`` (a store of format 1 read without
        writing has none)."""
        return (
            self.db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'curves'"
            ).fetchone()
            is not None
        )

    def curves(self, run_ids: list[str] | None = None) -> dict[str, list[dict[str, Any]]]:
        """Run id -> its series ``{"stage", "name", "steps", "values"}``, in the order they
        were recorded; for ``run_ids`` only when given. Runs without curves are absent."""
        if not self.has_curves_table():
            return {}
        query = "SELECT run_id, stage, name, steps, vals FROM curves"
        args: tuple = ()
        if run_ids is not None:
            if not run_ids:
                return {}
            query += f" WHERE run_id IN ({', '.join('?' for _ in run_ids)})"
            args = tuple(run_ids)
        out: dict[str, list[dict[str, Any]]] = {}
        for run_id, stage, name, steps, vals in self.db.execute(query + " ORDER BY rowid", args):
            try:
                series = {"stage": stage, "name": name, "steps": json.loads(steps),
                          "values": json.loads(vals)}  # fmt: skip
            except (TypeError, ValueError, RecursionError):
                raise ResultsStoreError(
                    f"Run {str(run_id)[:12]} in {self.path}: its curve {stage}/{name} is not "
                    "JSON (edited by hand?). Delete that row of the table curves."
                ) from None
            out.setdefault(run_id, []).append(series)
        return out

    def run(self, run_id: str, curves: bool = False) -> RunRecord | None:
        """The run ``run_id`` (with its curves when asked), or None."""
        row = self.db.execute(
            f"SELECT {', '.join(COLUMNS)} FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if row is None:
            return None
        record = self._record(row)
        if curves:
            record = record.with_curves(self.curves([run_id]).get(run_id, []))
        return record

    def fail(self, run_id: str, error: str, wall_time: float) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE runs SET status = 'failed', finished_at = ?, wall_time = ?, error = ? "
                "WHERE run_id = ?",
                (time.time(), wall_time, error, run_id),
            )

    def rows(self, status: str | None = "done", curves: bool = False) -> list[RunRecord]:
        """The runs with ``status`` (every run for None), in the order they were first
        recorded; with their curves (``RunRecord.curves``) when ``curves``."""
        query = (f"SELECT {', '.join(COLUMNS)} FROM runs"
                 + (" WHERE status = ?" if status else "") + " ORDER BY rowid")  # fmt: skip
        cursor = self.db.execute(query, (status,) if status else ())
        records = [self._record(row) for row in cursor]
        if not curves:
            return records
        found = self.curves()
        return [r.with_curves(found.get(r.run_id, [])) for r in records]

    def _record(self, row: sqlite3.Row) -> RunRecord:
        values = dict(zip(COLUMNS, row, strict=True))
        for key in JSON_COLUMNS:
            if values[key]:
                try:
                    values[key] = json.loads(values[key])
                except (TypeError, ValueError, RecursionError):
                    raise ResultsStoreError(
                        f"Run {str(values['run_id'])[:12]} in {self.path}: its column '{key}' "
                        "is not JSON (edited by hand?). Delete or repair that row."
                    ) from None
        try:
            return RunRecord.from_row(values)
        except ValidationError:
            version = values["spec"].get("version") if isinstance(values["spec"], dict) else None
            raise ResultsStoreError(
                f"Run {values['run_id'][:12]} in {self.path} has a spec this ssilbench cannot "
                f"read (spec version {version}; this one writes {SPEC_VERSION}). Upgrade "
                "ssilbench, or pass another directory with --results DIR."
            ) from None

    def put_rows(
        self, records: list[RunRecord], curves: Mapping[str, list[dict[str, Any]]] | None = None
    ) -> None:
        """Insert or replace whole run records (as ``rows`` returns them) with their curves
        where they carry them, and set the ``curves`` of runs by id, in one transaction."""
        curves = curves or {}
        if not records and not curves:
            return
        placeholders = ", ".join("?" for _ in COLUMNS)
        values = [
            tuple(
                json.dumps(v, sort_keys=True) if c in JSON_COLUMNS and v is not None else v
                for c, v in r.to_row().items()
            )
            for r in records
        ]
        with self.transaction() as db:
            db.executemany(
                f"INSERT OR REPLACE INTO runs ({', '.join(COLUMNS)}) VALUES ({placeholders})",
                values,
            )
            for record in records:
                if record.curves is not None:  # None: the record was read without them
                    self._write_curves(db, record.run_id, record.curves)
            for run_id, series in curves.items():
                self._write_curves(db, run_id, series)
