"""One ``ssilbench data download``: the planned files fetched (or verified), checked on disk,
unpacked and, once imported, trusted, all under their download locks.

The command runs::

    with Download(manifest, planned, dest, reporter) as download:
        fetched = download.fetch_all()   # in place, checked, unpacked
        ...import...                     # on a DatasetError: download.reject_untrusted()
        download.trust()                 # hashes of first use enter downloads.lock.json

so that a hash enters the lock file only after its file proved itself, and a second command
downloading the same files waits for the first and then finds them in place.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ssilbench.data.download_fetch import Reporter, Transfer, fetch, human_size
from ssilbench.data.download_state import (
    DownloadError,
    FileLock,
    Lock,
    file_lock,
    move_aside,
    unpacked_marker,
)
from ssilbench.data.download_unpack import ArchiveRejected, UnpackLimits, unpack_zip
from ssilbench.errors import os_error_message

if TYPE_CHECKING:
    from ssilbench.data.download_manifest import Manifest, Planned

_CHUNK = 1 << 20


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass(frozen=True)
class Fetched:
    """A file that is in place and checked."""

    name: str
    path: Path
    sha256: str
    size: int
    downloaded: bool
    first_use: bool  # no published, pinned or recorded hash: recorded by trust()


def _retry(moved: Path) -> str:
    return f"It was moved aside to {moved}: run the command again to download it afresh."


def _mismatch(planned: Planned, actual: str, moved: Path) -> DownloadError:
    if planned.pinned:
        replaced = f"pin the new hash with --sha256 {planned.entry.name}=HEX"
    else:
        replaced = ("run the command with --refresh to forget the recorded hash (the new file "
                    f"is then trusted on first use), or pin it with --sha256 "
                    f"{planned.entry.name}=HEX")  # fmt: skip
    return DownloadError(
        f"{planned.entry.name} is corrupted or not the published file: sha256 {actual}, "
        f"expected {planned.expected} (from {planned.expected_from}). {_retry(moved)} If the "
        f"publisher replaced the file on purpose, {replaced}."
    )


class Download:
    """The download of ``planned`` files of ``manifest`` into ``dest`` (a context manager
    holding each file's download lock; see the module docstring)."""

    def __init__(
        self,
        manifest: Manifest,
        planned: list[Planned],
        dest: Path,
        reporter: Reporter,
        transfer: Transfer | None = None,
        limits: UnpackLimits | None = None,
        refresh: bool = False,
    ) -> None:
        self.manifest = manifest
        self.planned = list(planned)
        self.dest = Path(dest)
        self.reporter = reporter
        self.transfer = transfer or Transfer()
        self.limits = limits or UnpackLimits()
        self.refresh = refresh
        self.fetched: list[Fetched] = []
        self._locks: list[FileLock] = []

    def __enter__(self) -> Download:
        try:
            self.dest.mkdir(parents=True, exist_ok=True)
            # One order for every process, so that two downloads of overlapping file sets
            # never wait for each other's locks.
            for p in sorted(self.planned, key=lambda p: p.entry.name):
                lock = file_lock(p.path, p.entry.name, self.reporter.line)
                lock.acquire()
                self._locks.append(lock)
        except OSError as exc:
            self._release()
            raise DownloadError(os_error_message(self.dest, exc)) from None
        except BaseException:
            self._release()
            raise
        try:
            self._refresh_plan()
        except BaseException:
            self._release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._release()

    def _release(self) -> None:
        for lock in reversed(self._locks):
            lock.release()
        self._locks = []

    def _refresh_plan(self) -> None:
        """The plan as it stands now that the locks are held: another process may have put a
        file in place, or recorded its hash, while this one waited."""
        lock = Lock.read(self.dest)
        if self.refresh:
            for name in lock.forget([p.entry.name for p in self.planned if not p.pinned]):
                self.reporter.line(f"{name}: forgot the sha256 recorded on its first download "
                                   "(--refresh)")  # fmt: skip
        current = []
        for p in self.planned:
            expected, source = p.expected, p.expected_from
            if not p.pinned:
                item = lock.files.get(p.entry.name)
                expected = item["sha256"] if item else None
                source = lock.where(p.entry.name) if item else ""
            current.append(dataclasses.replace(p, expected=expected, expected_from=source,
                                               present=p.path.is_file()))  # fmt: skip
        self.planned = current

    # --- fetching and checking ---------------------------------------------------------------

    def fetch_all(self) -> list[Fetched]:
        """Download (or verify) every planned file, then unpack the archives; stops at the
        first problem with a DownloadError (files already finished stay, each checked)."""
        done = [self._one(p) for p in self.planned]
        self.fetched = done
        for p, fetched in zip(self.planned, done, strict=True):
            if p.entry.unpack == "zip":
                self._unpack(p, fetched)
        return done

    def _one(self, p: Planned) -> Fetched:
        name = p.entry.name
        if p.present:
            self.reporter.line(f"{name}: already here, verifying")
            where, downloaded = p.path, False
        else:
            self._check_room(p)
            fetch(p, self.reporter, self.transfer, self.manifest.homepage)
            where, downloaded = p.part, True
        try:
            size, actual = where.stat().st_size, sha256_of(where)  # the bytes on disk
        except OSError as exc:
            raise DownloadError(os_error_message(where, exc, "read")) from None
        if p.expected is None and p.entry.size is not None and size != p.entry.size:
            moved = move_aside(where, p.path)
            raise DownloadError(
                f"{name} has {size} bytes, expected {p.entry.size} (from the "
                f"{self.manifest.family} manifest): the download is damaged or the file is not "
                f"the published one. {_retry(moved)}"
            )
        if p.expected and actual != p.expected:
            raise _mismatch(p, actual, move_aside(where, p.path))
        if downloaded:
            where.replace(p.path)
        if p.expected:
            self.reporter.line(f"{name}: sha256 verified ({p.expected_from})")
        else:
            self.reporter.line(f"{name}: sha256 {actual}; the publisher gives none, so it is "
                               "recorded (trust on first use) if the command succeeds")  # fmt: skip
        return Fetched(name, p.path, actual, size, downloaded, p.expected is None)

    def _check_room(self, p: Planned) -> None:
        if p.entry.size is None:
            return
        p.part.parent.mkdir(parents=True, exist_ok=True)
        need = p.entry.size - (p.part.stat().st_size if p.part.is_file() else 0)
        free = shutil.disk_usage(p.part.parent).free
        if need > free:
            raise DownloadError(
                f"{p.entry.name} needs {human_size(need)} in {p.part.parent}, but only "
                f"{human_size(free)} are free. Free some space there, or download into a folder "
                "on a larger disk with --dest DIR, and run the command again."
            )

    def _unpack(self, p: Planned, fetched: Fetched) -> None:
        # Members may not replace other files of the manifest (nor the archive itself).
        protected = frozenset(PurePosixPath(f.name).parts[0] for f in self.manifest.files)
        marker = unpacked_marker(self.dest, p.path.name)
        if marker.is_file() and marker.read_text().strip() == fetched.sha256:
            return  # this content is unpacked already
        self.reporter.line(f"{p.entry.name}: unpacking into {self.dest}")
        try:
            unpack_zip(p.path, self.dest, fetched.sha256, self.limits, protected)
        except ArchiveRejected as exc:
            raise DownloadError(f"{exc} {_retry(move_aside(p.path))}") from None

    # --- after the import --------------------------------------------------------------------

    def trust(self) -> None:
        """Record the hash of each file used on first use: it was in place, unpacked and
        imported, so later copies are checked against it."""
        lock = Lock.read(self.dest)
        for p, fetched in zip(self.planned, self.fetched, strict=True):
            if fetched.first_use:
                lock.record(p.entry.name, fetched.sha256, fetched.size, p.url)
                self.reporter.line(
                    f"{p.entry.name}: the publisher gives no sha256; recorded {fetched.sha256} "
                    f"in {lock.path} (trust on first use): later copies are checked against it"
                )

    def reject_untrusted(self) -> list[tuple[str, Path]]:
        """Move aside the files used on first use (no hash vouches for them), after their
        import failed: the next run downloads them afresh. Returns (name, new path)."""
        moved = []
        for p, fetched in zip(self.planned, self.fetched, strict=True):
            if fetched.first_use and p.path.is_file():
                moved.append((p.entry.name, move_aside(p.path)))
        return moved


def download_all(
    manifest: Manifest,
    planned: list[Planned],
    dest: Path,
    reporter: Reporter,
    transfer: Transfer | None = None,
    limits: UnpackLimits | None = None,
    refresh: bool = False,
) -> list[Fetched]:
    """Download (or verify) and unpack every planned file and trust the hashes of first use,
    without an import (``--no-import``, and tests of the transfer)."""
    with Download(manifest, planned, dest, reporter, transfer, limits, refresh) as download:
        fetched = download.fetch_all()
        download.trust()
    return fetched


def remove_downloads(planned: list[Planned], dest: Path) -> None:
    """Delete the downloaded files and what was unpacked from them (``--remove-downloads``),
    keeping the lock file so that a later download is still checked."""
    for p in planned:
        if p.entry.unpack == "zip" and p.path.is_file():
            with zipfile.ZipFile(p.path) as zf:
                tops = {PurePosixPath(m).parts[0] for m in zf.namelist() if m.strip("/")}
            for top in tops - {"/", ".."}:  # unpacking refused such members anyway
                target = dest / top
                if target.is_dir():
                    shutil.rmtree(target, ignore_errors=True)
                elif target.exists():
                    target.unlink()
            unpacked_marker(dest, p.path.name).unlink(missing_ok=True)
        p.path.unlink(missing_ok=True)
