"""Where a command may write: an output never lands on what ssilbench keeps or reads.

Every file a command writes for the user (``--out`` of ``leaderboard``, ``results export``,
``report``, ``plot``, ``curves``, ``analyze``, ``expert train``) goes through
:func:`write_atomic` or :func:`atomic_path`: into a temporary file with a name of its own in
the target's folder (so concurrent writers never share one), then renamed into place, so a
reader sees the old file or the new one and never half of one.

Before anything is computed, the command states what it must not overwrite
(:func:`guard`): the results store (its SQLite file, the write-ahead log and shared-memory
files beside it, the stage cache, checkpoints and timings), the dataset cache, and the
files it reads (sweep files, exports). A target that is one of them, or lies inside one of
the folders, is refused with one message naming the file; nothing is written. The guard
stays in force while the command runs, so a file written inside an output folder is
checked too.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ssilbench.errors import OutputError, os_error_message

STORE_FILE = "results.sqlite"
# SQLite keeps a store's recent writes in these files beside it until a checkpoint.
STORE_COMPANIONS = ("-wal", "-shm", "-journal")
# What a results folder keeps besides the store: trained stages, run checkpoints, SLURM job
# files, kept policies (run --keep-policy) and measured step times.
STORE_FOLDERS = ("cache", "checkpoints", "slurm", "policies")
STORE_FILES = ("timings.json",)


@dataclass(frozen=True)
class Kept:
    """A file (or, with ``tree``, a folder and everything in it) no output may replace."""

    path: Path
    what: str
    tree: bool = False
    allow: tuple[Path, ...] = ()  # folders inside a tree where writing is expected

    def covers(self, target: Path) -> bool:
        if target == self.path:
            return True
        if not self.tree or self.path not in target.parents:
            return False
        return not any(a == target or a in target.parents for a in self.allow)


def resolved(path: Path | str) -> Path:
    """``path`` absolute, with ``~`` expanded and symbolic links followed (as far as they
    exist): two spellings of one file compare equal."""
    return Path(os.path.realpath(Path(path).expanduser()))


def results_store(results: Path | str) -> list[Kept]:
    """The results store in the folder ``results`` and what it keeps beside it."""
    folder = resolved(results)
    store = folder / STORE_FILE
    kept = [Kept(store, "the results store")]
    kept += [Kept(folder / (STORE_FILE + s), f"the results store's SQLite {s[1:]} file")
             for s in STORE_COMPANIONS]  # fmt: skip
    kept += [Kept(folder / name, f"the results store's {name} folder", tree=True)
             for name in STORE_FOLDERS]  # fmt: skip
    kept += [Kept(folder / name, "a file the results store keeps") for name in STORE_FILES]
    return kept


def data_root(root: Path | str, allow: Iterable[str] = ()) -> Kept:
    """The dataset cache: nothing but the commands that build datasets writes there
    (``allow``: subfolders where a command's own output belongs, e.g. ``experts``)."""
    folder = resolved(root)
    return Kept(folder, "the dataset cache (--data-root)", tree=True,
                allow=tuple(folder / a for a in allow))  # fmt: skip


def inputs(paths: Iterable[Path | str], what: str) -> list[Kept]:
    """Files the command reads (``what``: e.g. 'a sweep file this command reads')."""
    return [Kept(resolved(p), what) for p in paths]


_GUARDED: list[Kept] = []


@contextmanager
def guard(
    kept: Iterable[Kept], outputs: Iterable[tuple[str, Path | str | None]] = ()
) -> Iterator[None]:
    """Refuse the ``outputs`` ((flag, path) pairs; a None path is skipped) that would land on
    ``kept``, then keep ``kept`` guarded against every :func:`write_atomic` until the block
    ends."""
    kept = list(kept)
    for flag, path in outputs:
        if path is not None:
            check_output(Path(path), kept, flag)
    _GUARDED.extend(kept)
    try:
        yield
    finally:
        for item in kept:
            _GUARDED.remove(item)


def check_output(target: Path, kept: Iterable[Kept] | None = None, flag: str = "--out") -> Path:
    """``target`` if no kept file or folder covers it; else an OutputError naming both."""
    where = resolved(target)
    for item in _GUARDED if kept is None else kept:
        if item.covers(where) or _same_file(where, item.path):
            if where != item.path and item.tree:
                why = f"it lies in {item.what}, {item.path}"
            else:
                spelled = Path(target).expanduser().absolute() == item.path
                why = f"it is {item.what}" + ("" if spelled else f", {item.path}")
            raise OutputError(
                f"Refusing to write {flag} {target}: {why}, which this command must not "
                "overwrite. Nothing was written; choose another path."
            )
    return target


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are one file (a hard link is another name of it)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


@contextmanager
def atomic_path(target: Path, hint: str = "") -> Iterator[Path]:
    """A temporary path in ``target``'s folder to write the output to; renamed onto
    ``target`` when the block ends without an error, removed when it raises. An OS error
    becomes one OutputError naming ``target`` and its cause (disk full, read-only, ...)."""
    target = check_output(Path(target))
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        os.replace(tmp, target)
    except OSError as exc:
        raise OutputError(f"{os_error_message(target, exc)} {hint}".rstrip()) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def write_atomic(target: Path, data: str | bytes, hint: str = "") -> Path:
    """Write ``data`` (text as UTF-8) to ``target`` through :func:`atomic_path`."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(Path(target), hint) as tmp:
        tmp.write_bytes(payload)
    return Path(target)
