"""Unpacking a downloaded zip archive, checked and bounded before anything is written.

From the archive's central directory, before a byte is extracted: every member lands inside
the download folder, none is named like a file ssilbench keeps there (the lock file,
markers, dataset manifests and stamps: :func:`ssilbench.data.download_state.reserved_part`)
or like another file of the manifest, the total unpacked size and the compression ratio
stay under their limits, and the disk has room for it. Members are then extracted into a
hidden folder, each stopped if it inflates beyond the size it declares, and moved into
place together; a marker holding the archive's sha256 makes a rerun skip it.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from ssilbench.data.download_fetch import human_size
from ssilbench.data.download_state import (
    DownloadError,
    reserved_part,
    staging_folder,
    unpacked_marker,
)
from ssilbench.errors import UsageError, os_error_message

MAX_UNPACKED = 100 * 10**9  # bytes: above the largest published archive (a Procgen game)
MAX_RATIO = 200.0  # data compresses far less; deflate bombs reach ~1000
# A member this small is not ratio-checked on its own: a small run of zeros compresses far
# better than data does, harmlessly; the archive as a whole still is.
_RATIO_FLOOR = 1 << 20
_CHUNK = 1 << 20
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}


def parse_size(text: str, flag: str) -> int:
    """'200GB' -> 200_000_000_000 (decimal units, as sizes are shown; bytes without one)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _UNITS or float(match.group(1)) <= 0:
        raise UsageError(f"{flag} {text!r} is not a size; give a number of bytes with a unit, "
                         f"e.g. {flag} 200GB (kB, MB, GB, TB).")  # fmt: skip
    return int(float(match.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class UnpackLimits:
    """The bounds of one unpacking (``--max-unpacked``, ``--max-ratio``)."""

    max_bytes: int = MAX_UNPACKED
    max_ratio: float = MAX_RATIO


class ArchiveRejected(DownloadError):
    """An archive that is damaged or unsafe: the caller moves it aside and says how to retry."""


def _refuse(archive: Path, member: str, why: str) -> ArchiveRejected:
    return ArchiveRejected(f"{archive} holds the member {member!r}, {why}; the archive is "
                           "refused and nothing was unpacked.")  # fmt: skip


def check_members(archive: Path, members: list[zipfile.ZipInfo], protected: frozenset[str]) -> None:
    """Refuse members that would land outside the folder, on ssilbench's own files or on
    other downloaded files (``protected``: the first path component of each)."""
    protected = frozenset(name.lower() for name in protected)  # as a case-insensitive disk
    seen: set[str] = set()
    files: set[str] = set()
    parents: set[str] = set()
    for info in members:
        name = info.filename
        path = PurePosixPath(name)
        if not name.strip("/") or path.is_absolute() or ".." in path.parts or "\\" in name:
            raise _refuse(archive, name, "which would land outside the download folder")
        if reserved_part(name):
            raise _refuse(archive, name, f"named like ssilbench's own '{reserved_part(name)}' "
                                         "(lock file, unpack marker, dataset manifest or "
                                         "stamp), which no download may rewrite")  # fmt: skip
        if path.parts[0].lower() in protected:
            raise _refuse(archive, name, f"which would replace the downloaded '{path.parts[0]}'")
        if info.flag_bits & 0x1:
            raise _refuse(archive, name, "which is encrypted")
        key = "/".join(path.parts).lower()
        if key in seen:
            raise _refuse(archive, name, "listed twice (letter case aside)")
        seen.add(key)
        if not info.is_dir():
            files.add(key)
        parents.update("/".join(path.parts[:i]).lower() for i in range(1, len(path.parts)))
    clash = sorted(files & parents)
    if clash:
        raise _refuse(archive, clash[0], "both a file and a folder")


def _suggest(n: float) -> str:
    """A round ``--max-unpacked`` value just above ``n`` bytes."""
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6)):
        if n >= scale:
            return f"{math.ceil(n / scale)}{unit}"
    return "1MB"


def check_bounds(archive: Path, members: list[zipfile.ZipInfo], dest: Path,
                 limits: UnpackLimits) -> int:  # fmt: skip
    """The total unpacked size, after checking it and the compression ratios against
    ``limits`` and the free space of ``dest``, from the central directory alone."""
    total = sum(info.file_size for info in members)
    again = "Nothing was unpacked; the file in place is verified, not downloaded, when you " \
            "run the command again"  # fmt: skip
    if total > limits.max_bytes:
        raise DownloadError(
            f"{archive} would unpack to {human_size(total)} ({len(members)} members), over the "
            f"limit of {human_size(limits.max_bytes)}. {again}: if you expect it to be this "
            f"large, raise the limit with --max-unpacked {_suggest(total)}."
        )
    packed = max(archive.stat().st_size, 1)
    # Overlapping members (one compressed stream listed many times) only show in the ratio
    # of the whole archive: each member alone looks ordinary.
    worst = [(total / packed, "the archive", packed, total)] + [
        (info.file_size / max(info.compress_size, 1), f"its member {info.filename!r}",
         info.compress_size, info.file_size)
        for info in members if info.file_size >= _RATIO_FLOOR
    ]  # fmt: skip
    ratio, what, small, large = max(worst, key=lambda item: item[0])
    if ratio > limits.max_ratio:
        raise DownloadError(
            f"{archive}: {what} would unpack {human_size(small)} into {human_size(large)}, a "
            f"compression ratio of {ratio:.0f}, over the limit of {limits.max_ratio:g} (data "
            f"compresses far less; a zip bomb looks like this). {again}: if you trust the "
            f"file, raise the limit with --max-ratio {math.ceil(ratio)}."
        )
    free = shutil.disk_usage(dest).free
    if total > free:
        raise DownloadError(
            f"Unpacking {archive} needs {human_size(total)} in {dest}, but only "
            f"{human_size(free)} are free. {again}: free some space there, or download into a "
            "folder on a larger disk with --dest DIR."
        )
    return total


def _extract(archive: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, staging: Path) -> None:
    target = staging.joinpath(*PurePosixPath(info.filename).parts)
    if info.is_dir():
        target.mkdir(parents=True, exist_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    with zf.open(info) as source, target.open("xb") as out:
        while block := source.read(_CHUNK):
            written += len(block)
            if written > info.file_size:  # the central directory is what was checked
                why = f"which inflates beyond the {info.file_size} bytes it declares"
                raise _refuse(archive, info.filename, why)
            out.write(block)


def unpack_zip(
    archive: Path,
    dest: Path,
    sha256: str,
    limits: UnpackLimits | None = None,
    protected: frozenset[str] = frozenset(),
) -> bool:
    """Extract ``archive`` into ``dest`` once per archive content (False: already done):
    members go through a hidden folder and replace the entries of the same names. An
    unsafe or damaged archive raises ArchiveRejected, a limit or a full disk DownloadError;
    either way nothing was moved into ``dest``."""
    limits = limits or UnpackLimits()
    marker = unpacked_marker(dest, archive.name)
    if marker.is_file() and marker.read_text().strip() == sha256:
        return False
    staging = staging_folder(dest, archive.name)
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            check_members(archive, members, protected)
            check_bounds(archive, members, dest, limits)
            staging.mkdir()
            for info in members:
                _extract(archive, zf, info, staging)
    except DownloadError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError,
            NotImplementedError) as exc:  # fmt: skip
        shutil.rmtree(staging, ignore_errors=True)
        raise ArchiveRejected(f"{archive} is not a readable zip archive ({exc}).") from None
    except OSError as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise DownloadError(os_error_message(staging, exc)) from None
    for entry in sorted(staging.iterdir()):
        target = dest / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        elif target.exists() or target.is_symlink():
            target.unlink()
        os.replace(entry, target)
    staging.rmdir()
    marker.write_text(sha256 + "\n")
    return True
