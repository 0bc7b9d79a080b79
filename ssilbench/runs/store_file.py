"""The results store's file: its schema, what makes a file an ssilbench store, and opening it
read-only without changing a byte.

Reading never writes: ``leaderboard``, ``status``, ``results export``, ``plot``, ``report``,
``analyze`` and ``plan`` open the store through :func:`open_read_only`, which neither sets
the journal mode nor creates the schema, and creates, changes or deletes no file (not even
SQLite's ``-wal`` and ``-shm`` side files), so that a store in a read-only directory reads,
and a store being written by a sweep is read without disturbing it. A file that is not an
ssilbench store (empty, not SQLite, foreign tables, a newer store format) is refused with a
:class:`ResultsStoreError` naming it, and left untouched; the writing store runs the same
check before it changes anything.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

from ssilbench.errors import ResultsStoreError

DB_NAME = "results.sqlite"
# Bumped when the layout of the store changes; a store from a newer ssilbench is refused.
# 1: the table runs. 2: the table curves (a store of format 1 gains it, empty, when a sweep
# opens it for writing; readers take a store without it as one without curves).
SCHEMA_VERSION = 2

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id       TEXT PRIMARY KEY,
    spec         TEXT NOT NULL,
    method       TEXT NOT NULL,
    method_label TEXT NOT NULL,
    env          TEXT NOT NULL,
    env_label    TEXT NOT NULL,
    budget       TEXT NOT NULL,
    seed         INTEGER NOT NULL,
    status       TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed', 'interrupted')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    started_at   REAL,
    finished_at  REAL,
    wall_time    REAL,
    n_labeled    INTEGER,
    score        REAL,
    final_score  REAL,
    max_score    REAL,
    report       TEXT,
    normaliser   TEXT,
    timeline     TEXT,
    metrics      TEXT,
    stages       TEXT,
    versions     TEXT,
    device       TEXT,
    host         TEXT,
    pid          INTEGER,
    error        TEXT
);
CREATE INDEX IF NOT EXISTS runs_by_env ON runs (env_label, method_label, budget);
CREATE TABLE IF NOT EXISTS curves (
    run_id       TEXT NOT NULL,
    stage        TEXT NOT NULL,
    name         TEXT NOT NULL,
    steps        TEXT NOT NULL,
    vals         TEXT NOT NULL,
    PRIMARY KEY (run_id, stage, name)
);
"""
"""``curves``: one row per series of a run (its training loss per stage, each evaluation's
numbers as ``eval/NAME``, what the method logged with ``ctx.log_metric``): ``steps`` and
``vals`` are JSON lists of equal length (global steps; floats, null where not finite),
thinned to at most 1,000 points (``ssilbench.runner.telemetry``)."""

STATUSES = ("running", "done", "failed", "interrupted")
JSON_COLUMNS = ("spec", "normaliser", "timeline", "metrics", "stages", "versions")
COLUMNS = ("run_id", "spec", "method", "method_label", "env", "env_label", "budget", "seed",
           "status", "attempts", "started_at", "finished_at", "wall_time", "n_labeled", "score",
           "final_score", "max_score", "report", "normaliser", "timeline", "metrics", "stages",
           "versions", "device", "host", "pid", "error")  # fmt: skip

_MAGIC = b"SQLite format 3\x00"
_HINT = "Pass the directory of an ssilbench results store with --results DIR."


def open_read_only(path: Path) -> sqlite3.Connection:
    """A connection to the ssilbench store at ``path`` that reads it and cannot write it;
    opening it changes no file. Anything but an ssilbench store is a ResultsStoreError."""
    db = _connect_read_only(path)
    try:
        identify(db, path)
    except BaseException:
        db.close()
        raise
    return db


def check_store(path: Path) -> None:
    """Refuse, untouched, a non-empty file at ``path`` that a writing store must not take
    over: anything but an ssilbench store or an SQLite database without tables (what a
    store interrupted while being created leaves). An empty file is a new store."""
    if path.stat().st_size == 0:
        return
    db = _connect_read_only(path)
    try:
        identify(db, path, allow_new=True)
    finally:
        db.close()


def identify(db: sqlite3.Connection, path: Path, allow_new: bool = False) -> None:
    """Refuse (ResultsStoreError) a database that is not an ssilbench store of a format this
    ssilbench reads; ``allow_new`` lets one without any table pass (a store to create)."""
    try:
        found = db.execute("PRAGMA user_version").fetchone()[0]
        tables = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        columns = {row[1] for row in db.execute("PRAGMA table_info(runs)")}
    except sqlite3.DatabaseError as exc:
        raise not_a_store(path, str(exc)) from None
    if found > SCHEMA_VERSION:
        raise ResultsStoreError(
            f"The results store {path} was written by a newer ssilbench (store format "
            f"{found}; this one reads up to {SCHEMA_VERSION}). Upgrade ssilbench, or pass "
            "another directory with --results DIR."
        )
    if allow_new and not tables:
        return
    if "runs" not in tables:
        what = f"tables {', '.join(sorted(tables))}" if tables else "no tables"
        raise not_a_store(path, f"an SQLite database with {what} and no table 'runs'")
    missing = [c for c in COLUMNS if c not in columns]
    if missing:
        raise not_a_store(path, f"its table 'runs' lacks the columns {', '.join(missing)}")


def not_a_store(path: Path, why: str) -> ResultsStoreError:
    return ResultsStoreError(
        f"Cannot open the results store {path}: {why}. It is not an ssilbench results store; "
        f"it was left untouched. {_HINT}"
    )


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """Open ``path`` read-only without creating, changing or deleting any file.

    A plain ``mode=ro`` open of a WAL database creates the ``-wal`` and ``-shm`` side files
    when they are missing (and fails in a read-only directory, where it cannot), and writes
    its read marks into an existing ``-shm``. So:

    - no ``-wal`` file: no connection has the store open and every commit is in the main
      file (SQLite checkpoints and deletes the WAL when the last connection closes), which
      is read with ``immutable=1``: no locks, no side files. This is also how a store in a
      read-only directory is read. (A sweep that starts meanwhile writes its commits to a
      new WAL, unseen: this reader sees the store as it was when opened.)
    - a ``-wal`` and a ``-shm``: a sweep has the store open, or one was killed. Read with
      ``mode=ro&readonly_shm=1``: SQLite uses the live ``-shm`` without writing to it, or
      rebuilds the WAL index in private memory when no writer is left.
    - a ``-wal`` without a ``-shm`` (copied without it): no writer can hold the store, so a
      private copy of the file and its WAL is recovered in a temporary folder and read from
      memory.
    """
    header = _header(path)
    wal, shm = (path.with_name(path.name + suffix) for suffix in ("-wal", "-shm"))
    uri = path.resolve().as_uri()
    for _ in range(3):  # a sweep may close (and remove its side files) between the looks
        # SQLite opens a file in WAL mode when its read version (byte 19) is 2, whatever
        # byte 18 says: not WAL, a read-only open creates nothing.
        if header[19] != 2:
            params = "mode=ro"
        elif not wal.exists():
            params = "immutable=1"
        elif shm.exists():
            params = "mode=ro&readonly_shm=1"
        else:
            return _private_copy(path, wal)
        try:
            return _opened(sqlite3.connect(f"{uri}?{params}", uri=True, timeout=30,
                                           isolation_level=None))  # fmt: skip
        except sqlite3.OperationalError:
            continue
        except sqlite3.DatabaseError as exc:
            raise not_a_store(path, str(exc)) from None
    return _private_copy(path, wal)


def _opened(db: sqlite3.Connection) -> sqlite3.Connection:
    """``db`` made query-only and read once, so that opening errors show here."""
    try:
        db.execute("PRAGMA query_only = 1")
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        db.close()
        raise
    return db


def _header(path: Path) -> bytes:
    try:
        with open(path, "rb") as f:
            header = f.read(100)
    except OSError as exc:
        raise ResultsStoreError(
            f"Cannot read the results store {path}: {exc.strerror or exc}. {_HINT}"
        ) from None
    if not header:
        raise not_a_store(path, "the file is empty (0 bytes)")
    if len(header) < 100 or not header.startswith(_MAGIC):
        raise not_a_store(path, "file is not a database")
    return header


def _private_copy(path: Path, wal: Path) -> sqlite3.Connection:
    """The store and its WAL recovered in a private temporary copy, read into memory."""
    try:
        with tempfile.TemporaryDirectory(prefix="ssilbench-read-") as tmp:
            copy = Path(tmp) / DB_NAME
            shutil.copyfile(path, copy)
            if wal.exists():
                shutil.copyfile(wal, copy.with_name(copy.name + "-wal"))
            disk = sqlite3.connect(copy, isolation_level=None)
            memory = sqlite3.connect(":memory:", isolation_level=None)
            try:
                disk.backup(memory)
            except BaseException:
                memory.close()
                raise
            finally:
                disk.close()
    except OSError as exc:
        raise ResultsStoreError(
            f"Cannot read the results store {path}: {exc.strerror or exc}. {_HINT}"
        ) from None
    except sqlite3.DatabaseError as exc:
        raise not_a_store(path, str(exc)) from None
    return _opened(memory)
