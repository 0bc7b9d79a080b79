"""What ``ssilbench data download`` keeps in a download folder, and the locks that keep it
consistent when several processes download into one folder.

- ``downloads.lock.json``: the sha256 of each file whose publisher gives none, recorded once
  the file was in place, unpacked and imported (trust on first use);
- ``NAME.part``: a download in progress; ``NAME.download-lock``: held while one process
  downloads, unpacks and imports NAME; ``NAME.rejected-TIME``: a file that failed its
  checks, moved aside;
- ``.ARCHIVE.unpacked`` / ``.ARCHIVE.unpacking``: the marker of an unpacked archive and the
  folder it is unpacked into first.

An archive member named like any of these (or like a dataset's own files) is refused, so
that no download can rewrite what ssilbench trusts.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from ssilbench.data.datasets import STAMPS
from ssilbench.errors import SsilbenchError, os_error_message
from ssilbench.train.leases import GUARD_SUFFIX, LEASE_SUFFIX

LOCK_NAME = "downloads.lock.json"
LOCK_FORMAT = "ssilbench.download-lock"
PART_SUFFIX = ".part"
FILE_LOCK_SUFFIX = ".download-lock"
REJECTED_INFIX = ".rejected-"
HEX64 = re.compile(r"^[0-9a-f]{64}$")


class DownloadError(SsilbenchError):
    """A download failed or a file is not the published one; the message says what to do."""


def part_path(path: Path) -> Path:
    return path.with_name(path.name + PART_SUFFIX)


def unpacked_marker(dest: Path, archive_name: str) -> Path:
    """The file holding the sha256 of the archive content last unpacked into ``dest``."""
    return dest / f".{PurePosixPath(archive_name).name}.unpacked"


def staging_folder(dest: Path, archive_name: str) -> Path:
    return dest / f".{PurePosixPath(archive_name).name}.unpacking"


def reserved_part(member: str) -> str | None:
    """The component of the archive member path ``member`` that is named like a file
    ssilbench writes in a download or data folder, or None."""
    for part in PurePosixPath(member).parts:
        name = part.lower()  # the same file on a case-insensitive disk (macOS, Windows)
        hidden = name.startswith(".")
        if (
            name == LOCK_NAME
            or name.startswith(LOCK_NAME + ".")  # its temporary files
            or name.endswith((PART_SUFFIX, FILE_LOCK_SUFFIX, LEASE_SUFFIX, GUARD_SUFFIX))
            or REJECTED_INFIX in name
            or (hidden and name.endswith((".unpacked", ".unpacking", ".partial")))
            or (hidden and ".stale-" in name)  # a dataset being replaced
            or name == "manifest.json"  # a dataset's manifest
            or name == STAMPS
            or name.startswith(STAMPS + ".")
        ):
            return part
    return None


def move_aside(path: Path, like: Path | None = None) -> Path:
    """Rename a file that failed its checks to ``NAME.rejected-TIME`` beside it (nothing is
    deleted: it can be inspected), NAME being that of ``like`` (a ``.part``'s final file)
    or its own, and return the new path."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = (like or path).name
    target = path.with_name(f"{name}{REJECTED_INFIX}{stamp}")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{name}{REJECTED_INFIX}{stamp}-{number}")
    try:
        os.replace(path, target)
    except OSError as exc:
        raise DownloadError(os_error_message(path, exc, "move aside")) from None
    return target


# --- per-file locks ----------------------------------------------------------------------


class FileLock:
    """An exclusive lock on one download, across processes: ``fcntl.flock`` on
    ``NAME.download-lock`` beside the file.

    flock rather than the stage leases of ssilbench.train.leases: the kernel releases it the
    moment its holder exits, however it dies, so there is no heartbeat thread, no staleness
    timeout and no clock to trust, and a waiting process wakes as soon as the holder is
    done (on NFS, Linux emulates flock with the server's byte-range locks). The holder
    removes the file before unlocking, so that the folder keeps no lock files; a waiter that
    then finds its file gone (or replaced) starts over.
    """

    def __init__(self, path: Path, what: str, log: Callable[[str], None]) -> None:
        self.path = path
        self.what = what
        self.log = log
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "?"
                    self.log(f"{self.what}: another process ({holder}) is downloading it; "
                             "waiting for it to finish")  # fmt: skip
                    fcntl.flock(fd, fcntl.LOCK_EX)
                if not self._still_ours(fd):
                    os.close(fd)
                    continue
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{socket.gethostname()} pid {os.getpid()}\n".encode(), 0)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
            return

    def _still_ours(self, fd: int) -> bool:
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return False
        held = os.fstat(fd)
        return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino)

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)  # closing the descriptor releases the lock
        self._fd = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def file_lock(path: Path, what: str, log: Callable[[str], None]) -> FileLock:
    """The lock serialising downloads of the file at ``path``."""
    return FileLock(path.with_name(path.name + FILE_LOCK_SUFFIX), what, log)


# --- the lock file: hashes trusted on first use --------------------------------------------


@dataclass
class Lock:
    """``DEST/downloads.lock.json``: the sha256 each file had when it was first downloaded
    (and then unpacked and imported), for files whose publisher gives none."""

    path: Path
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def read(cls, dest: Path) -> Lock:
        path = Path(dest) / LOCK_NAME
        if not path.exists():
            return cls(path)
        try:
            data = json.loads(path.read_text())
            files = data["files"]
            if data.get("format") != LOCK_FORMAT or not isinstance(files, dict):
                raise ValueError("not a download lock file")
            for name, item in files.items():
                if not HEX64.match(str(item.get("sha256", ""))):
                    raise ValueError(f"entry {name!r} has no valid sha256")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DownloadError(
                f"The lock file {path} is unreadable ({exc}). Delete it to record the hashes "
                "again on the next download."
            ) from None
        return cls(path, files)

    def where(self, name: str) -> str:
        """'the lock file PATH (recorded DATE)': where the expected hash of ``name`` is from."""
        recorded = self.files.get(name, {}).get("recorded")
        return f"the lock file {self.path}" + (f", recorded {recorded}" if recorded else "")

    @contextlib.contextmanager
    def _updating(self) -> Iterator[Lock]:
        # Processes downloading other files into the same folder update it too: re-read it
        # under its own lock so that no one's entry is lost.
        with file_lock(self.path, LOCK_NAME, lambda _: None):
            current = Lock.read(self.path.parent)
            yield current
            text = json.dumps({"format": LOCK_FORMAT, "version": 1, "files": current.files},
                              indent=2)  # fmt: skip
            temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            try:
                temporary.write_text(text + "\n")
                os.replace(temporary, self.path)
            except OSError as exc:
                temporary.unlink(missing_ok=True)
                raise DownloadError(os_error_message(self.path, exc)) from None
            self.files = current.files

    def record(self, name: str, sha256: str, size: int, url: str) -> None:
        with self._updating() as current:
            current.files[name] = {
                "sha256": sha256,
                "size": size,
                "url": url,
                "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }

    def forget(self, names: list[str]) -> list[str]:
        """Remove the entries of ``names``; returns those that were there."""
        if not self.path.exists():
            return []
        with self._updating() as current:
            gone = [name for name in names if current.files.pop(name, None) is not None]
        return gone
