"""Downloads of published expert data: a manifest an environment plugin ships, streamed with
resume and checked by sha256 (``ssilbench data download FAMILY``).

A manifest (TOML, format ``ssilbench.downloads`` v1) lists the files of one environment
family: where each is published, its size and sha256 where the publisher gives them, which
tasks need it and whether it is a zip archive to unpack. Downloading a file:

- streams it into ``NAME.part`` beside its final place; a ``.part`` left by an interrupted
  try is continued with an HTTP Range request (a server that ignores the range sends the
  whole file again, which is detected and handled);
- retries a dropped connection from where it stopped, a few times, then stops with the
  ``.part`` kept, so that running the command again resumes it;
- checks size and sha256 before the file is renamed (atomically) into place. A file whose
  hash differs is refused, naming the file and both hashes, and its ``.part`` deleted;
- where neither the manifest nor the user (``--sha256 NAME=HEX``) gives a hash, the hash
  seen on the first download is recorded in the download folder's lock file
  (``downloads.lock.json``, trust on first use) and later copies are checked against it.

Nothing here runs unless the user asks for a download: runs never touch the network.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ssilbench.errors import SsilbenchError, UsageError, os_error_message

FORMAT = "ssilbench.downloads"
LOCK_NAME = "downloads.lock.json"
LOCK_FORMAT = "ssilbench.download-lock"
_CHUNK = 1 << 20  # bytes read per call: large enough for speed, small enough for progress
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


class DownloadError(SsilbenchError):
    """A download failed or a file is not the published one; the message says what to do."""


# --- the manifest -----------------------------------------------------------------------


class FileEntry(BaseModel):
    """One published file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Path under the download folder (and under a --from-url "
                                  "mirror), '/'-separated, e.g. 'bigfish.zip'.")  # fmt: skip
    url: str = Field(description="Where the publisher serves it (http or https).")
    size: int | None = Field(None, ge=0, description="Bytes, where published.")
    sha256: str | None = Field(None, description="Lower-case hex, where published.")
    tasks: list[str] = Field(default_factory=list,
                             description="Tasks that need it; empty: every task.")  # fmt: skip
    unpack: Literal["zip"] | None = Field(None, description="Extract it into the folder.")
    note: str = ""

    @field_validator("name")
    @classmethod
    def _relative(cls, name: str) -> str:
        path = PurePosixPath(name)
        if not name or path.is_absolute() or ".." in path.parts or "\\" in name:
            raise ValueError(f"{name!r} must be a relative '/'-separated path without '..'")
        return name

    @field_validator("url")
    @classmethod
    def _http(cls, url: str) -> str:
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"{url!r} is not an http(s) URL")
        return url

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not _HEX64.match(value):
            raise ValueError(f"{value!r} is not 64 lower-case hex digits")
        return value


class Manifest(BaseModel):
    """The files of one environment family's published data (``downloads.toml``)."""

    model_config = ConfigDict(extra="forbid")

    format: Literal["ssilbench.downloads"]
    version: Literal[1]
    family: str
    title: str = Field(description="What the data is, for the listing before a download.")
    homepage: str = Field("", description="Where the publisher documents it.")
    license: str = ""
    hashes: str = Field("", description="Where the sha256s come from, or why there are none.")
    import_from: str = Field(".", description="Path under the download folder that "
                                              "'data import FAMILY --from' reads.")  # fmt: skip
    notes: str = ""
    files: list[FileEntry] = Field(min_length=1)

    @field_validator("files")
    @classmethod
    def _unique(cls, files: list[FileEntry]) -> list[FileEntry]:
        names = [f.name for f in files]
        doubled = sorted({n for n in names if names.count(n) > 1})
        if doubled:
            raise ValueError(f"file names listed twice: {', '.join(doubled)}")
        return files

    def tasks(self) -> list[str]:
        """Every task some file names, in manifest order."""
        return list(dict.fromkeys(t for f in self.files for t in f.tasks))

    def select(self, tasks: Iterable[str]) -> list[FileEntry]:
        """The files ``tasks`` need (every file when ``tasks`` is empty)."""
        chosen = set(tasks)
        if not chosen:
            return list(self.files)
        return [f for f in self.files if not f.tasks or chosen & set(f.tasks)]


def parse_manifest(text: str, origin: str) -> Manifest:
    """A manifest from TOML text; ``origin`` names it in error messages."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"Download manifest {origin} is not valid TOML: {exc}.") from None
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'manifest'}: {e['msg']}" for e in exc.errors()
        )
        raise UsageError(
            f"Download manifest {origin} is malformed: {problems}. The format is described "
            "in docs/plugin-authors.md (Declaring downloads)."
        ) from None


def read_manifest(path: Path) -> Manifest:
    """The manifest in the file ``path`` (``--manifest FILE``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(os_error_message(path, exc, "read")) from None
    return parse_manifest(text, str(path))


def packaged_manifest(environment: Any) -> Manifest | None:
    """The manifest the environment declares in its ``downloads`` attribute
    (``"package:file"``, package data of the plugin), or None when it declares none."""
    target = getattr(environment, "downloads", None)
    if not target:
        return None
    package, sep, name = str(target).partition(":")
    if not sep or not package or not name:
        raise UsageError(f"{type(environment).__name__}.downloads is {target!r}; it must be "
                         "'package:file', e.g. 'my_plugin:downloads.toml'.")  # fmt: skip
    try:
        text = resources.files(package).joinpath(name).read_text(encoding="utf-8")
    except (OSError, ModuleNotFoundError) as exc:
        raise UsageError(f"The download manifest {target} cannot be read ({exc}); the plugin "
                         "must ship it as package data.") from None  # fmt: skip
    return parse_manifest(text, target)


# --- the plan: what will be downloaded, from where, checked against what --------------------


@dataclass(frozen=True)
class Planned:
    """One file of a download, with its resolved URL and the hash it must have."""

    entry: FileEntry
    url: str
    path: Path
    expected: str | None
    expected_from: str  # "the manifest", "--sha256", "the lock file", "" (none: first use)
    present: bool  # complete in the folder already (verified before use)
    partial: int  # bytes of a .part left by an interrupted download

    @property
    def part(self) -> Path:
        return part_path(self.path)


def part_path(path: Path) -> Path:
    return path.with_name(path.name + ".part")


def mirror_url(base: str, name: str) -> str:
    """``name`` under the mirror ``base`` (``--from-url``)."""
    return base.rstrip("/") + "/" + urllib.parse.quote(name)


def check_base_url(base: str) -> str:
    """``--from-url`` checked: an http(s) URL."""
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"--from-url {base!r} is not an http(s) URL; give the base that holds "
                         "the files under their manifest names, e.g. "
                         "--from-url http://127.0.0.1:8000/procgen.")  # fmt: skip
    return base


def parse_pins(values: Iterable[str], manifest: Manifest) -> dict[str, str]:
    """``--sha256 NAME=HEX`` flags as {name: hex}, each name a file of the manifest."""
    pins: dict[str, str] = {}
    names = [f.name for f in manifest.files]
    for value in values:
        name, sep, digest = value.partition("=")
        digest = digest.strip().lower()
        if not sep or not _HEX64.match(digest):
            raise UsageError(f"--sha256 {value!r}: give NAME=HEX with 64 hex digits, e.g. "
                             f"--sha256 {names[0]}=<sha256>.")  # fmt: skip
        if name not in names:
            from ssilbench.errors import unknown

            raise unknown("file", name, names, " (in --sha256)")
        pins[name] = digest
    return pins


def plan_downloads(
    manifest: Manifest,
    files: list[FileEntry],
    dest: Path,
    base_url: str | None = None,
    pins: dict[str, str] | None = None,
) -> list[Planned]:
    """Each file's URL (the mirror's where ``base_url`` is given), place and expected hash:
    ``--sha256`` first, then the manifest, then a hash recorded on first use."""
    pins = pins or {}
    lock = Lock.read(dest)
    planned = []
    for entry in files:
        path = dest.joinpath(*PurePosixPath(entry.name).parts)
        if entry.name in pins:
            expected, source = pins[entry.name], "--sha256"
        elif entry.sha256:
            expected, source = entry.sha256, f"the {manifest.family} manifest"
        elif entry.name in lock.files:
            expected, source = lock.files[entry.name]["sha256"], f"the lock file {lock.path}"
        else:
            expected, source = None, ""
        part = part_path(path)
        planned.append(Planned(
            entry=entry,
            url=mirror_url(base_url, entry.name) if base_url else entry.url,
            path=path,
            expected=expected,
            expected_from=source,
            present=path.is_file(),
            partial=part.stat().st_size if part.is_file() and not path.is_file() else 0,
        ))  # fmt: skip
    return planned


def human_size(n: int | float) -> str:
    """1234567 -> '1.2 MB' (decimal units, as publishers and download tools state sizes)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def summary(planned: list[Planned]) -> list[str]:
    """What a download will fetch, for the lines shown before it starts."""
    todo = [p for p in planned if not p.present]
    known = [p for p in todo if p.entry.size is not None]
    total = sum(p.entry.size or 0 for p in known) - sum(p.partial for p in known)
    lines = []
    for p in planned:
        size = human_size(p.entry.size) if p.entry.size is not None else "size unknown"
        state = " (present: verified, not downloaded)" if p.present else ""
        if p.partial:
            state = f" (resuming: {human_size(p.partial)} already here)"
        check = f"sha256 from {p.expected_from}" if p.expected else "no published sha256"
        lines.append(f"  {p.entry.name}  {size}  {check}{state}")
    unknown = len(todo) - len(known)
    if known or not todo:
        head = f"{len(todo)} file(s) to download, {human_size(max(total, 0))}"
        if unknown:
            head += f" + {unknown} file(s) of unknown size"
    else:
        head = f"{len(todo)} file(s) to download, size unknown (not published)"
    if len(todo) < len(planned):
        head += f"; {len(planned) - len(todo)} already here"
    return [head, *lines]


# --- the lock file: hashes seen on first use -------------------------------------------------


@dataclass
class Lock:
    """``DEST/downloads.lock.json``: the sha256 each file had when it was first downloaded,
    for files whose publisher gives none."""

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
                if not _HEX64.match(str(item.get("sha256", ""))):
                    raise ValueError(f"entry {name!r} has no valid sha256")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DownloadError(
                f"The lock file {path} is unreadable ({exc}). Delete it to record the hashes "
                "again on the next download."
            ) from None
        return cls(path, files)

    def record(self, name: str, sha256: str, size: int, url: str) -> None:
        self.files[name] = {
            "sha256": sha256,
            "size": size,
            "url": url,
            "recorded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({"format": LOCK_FORMAT, "version": 1, "files": self.files}, indent=2)
        temporary = self.path.with_name(self.path.name + ".tmp")
        temporary.write_text(text + "\n")
        os.replace(temporary, self.path)


# --- progress --------------------------------------------------------------------------------


class Reporter(Protocol):
    """Where a download reports its progress."""

    def line(self, text: str) -> None: ...
    def start(self, name: str, total: int | None, done: int) -> None: ...
    def advance(self, n: int) -> None: ...
    def restart(self, done: int) -> None: ...
    def finish(self, ok: bool = True) -> None: ...


class PlainReporter:
    """Progress as plain lines (a log file, a pipe, SLURM): one at the start, one every
    ``every`` seconds while bytes arrive, one at the end."""

    def __init__(self, echo: Callable[[str], None], every: float = 10.0) -> None:
        self.echo = echo
        self.every = every
        self.name, self.total, self.done = "", None, 0
        self._start = self._last = 0.0
        self._first = 0

    def line(self, text: str) -> None:
        self.echo(text)

    def start(self, name: str, total: int | None, done: int) -> None:
        self.name, self.total, self.done, self._first = name, total, done, done
        self._start = self._last = time.monotonic()
        of = f" {human_size(total)}" if total is not None else " (size not announced)"
        at = f" from {human_size(done)}" if done else ""
        self.echo(f"{name}: downloading{of}{at}")

    def _status(self) -> str:
        elapsed = max(time.monotonic() - self._start, 1e-9)
        rate = (self.done - self._first) / elapsed
        if self.total:
            return (f"{human_size(self.done)} / {human_size(self.total)} "
                    f"({100 * self.done / self.total:.0f}%), {human_size(rate)}/s")  # fmt: skip
        return f"{human_size(self.done)}, {human_size(rate)}/s"

    def advance(self, n: int) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self.echo(f"{self.name}: {self._status()}")

    def restart(self, done: int) -> None:
        self.done = self._first = done

    def finish(self, ok: bool = True) -> None:
        if ok:
            elapsed = time.monotonic() - self._start
            self.echo(f"{self.name}: {self._status()}, done in {elapsed:.0f} s")


class RichReporter:
    """A rich progress bar per file on stderr (a terminal); each finished bar stays."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        self.progress: Any = None
        self.task: Any = None

    def line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def start(self, name: str, total: int | None, done: int) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )

        # One Progress per file, so that a finished file's bar is printed once and stays.
        self.progress = Progress(
            TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
            TransferSpeedColumn(), TimeRemainingColumn(), console=self.console,
        )  # fmt: skip
        self.progress.start()
        self.task = self.progress.add_task(name, total=total, completed=done)

    def advance(self, n: int) -> None:
        self.progress.advance(self.task, n)

    def restart(self, done: int) -> None:
        self.progress.update(self.task, completed=done)

    def finish(self, ok: bool = True) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


class SilentReporter:
    """No progress at all (``--quiet``); errors still stop the command."""

    def line(self, text: str) -> None:
        pass

    def start(self, name: str, total: int | None, done: int) -> None:
        pass

    def advance(self, n: int) -> None:
        pass

    def restart(self, done: int) -> None:
        pass

    def finish(self, ok: bool = True) -> None:
        pass


def reporter_for(quiet: bool, echo: Callable[[str], None]) -> Reporter:
    """A rich bar in a terminal, plain lines otherwise, nothing with ``--quiet``."""
    if quiet:
        return SilentReporter()
    if sys.stderr.isatty():
        return RichReporter()
    return PlainReporter(echo)


# --- streaming one file ----------------------------------------------------------------------


@dataclass
class Transfer:
    """Settings of the HTTP transfers (tests shorten the waits)."""

    retries: int = 5
    timeout: float = 60.0
    backoff: float = 2.0  # seconds before the first retry; doubles, at most 30 s
    user_agent: str = "ssilbench"


_DROPPED = (http.client.IncompleteRead, http.client.HTTPException, ConnectionError,
            socket.timeout, TimeoutError)  # fmt: skip


def _content_range(value: str | None) -> tuple[int, int | None] | None:
    """(first byte, total or None) of a ``Content-Range: bytes a-b/total`` header."""
    if not value:
        return None
    match = re.match(r"bytes\s+(\d+)-\d+/(\d+|\*)", value.strip())
    if not match:
        return None
    total = match.group(2)
    return int(match.group(1)), (None if total == "*" else int(total))


def _html_refusal(planned: Planned, host: str, manifest_home: str) -> DownloadError:
    where = f" from {manifest_home}" if manifest_home else ""
    return DownloadError(
        f"{host} answered with a web page instead of {planned.entry.name} ({planned.url}). "
        "Hosts such as Google Drive do this when a file's download quota is exceeded or it "
        f"needs a browser. Download it by hand{where}, put it at {planned.path} and run the "
        "command again (a complete file there is verified and used), or give a mirror with "
        "--from-url."
    )


def fetch(
    planned: Planned,
    reporter: Reporter,
    transfer: Transfer,
    homepage: str = "",
) -> tuple[str, int]:
    """Stream ``planned.url`` into ``planned.part``, resuming what is there; returns the
    (sha256, size) of the complete ``.part`` (not yet checked nor renamed)."""
    started: list[bool] = []  # whether the reporter shows this file (set by _fetch)
    try:
        result = _fetch(planned, reporter, transfer, homepage, started)
    except BaseException:
        if started:
            reporter.finish(ok=False)  # a live bar must stop before the error is shown
        raise
    if started:
        reporter.finish()
    return result


def _fetch(
    planned: Planned, reporter: Reporter, transfer: Transfer, homepage: str, started: list[bool]
) -> tuple[str, int]:
    part = planned.part
    part.parent.mkdir(parents=True, exist_ok=True)
    host = urllib.parse.urlsplit(planned.url).netloc
    attempt = 0
    while True:
        offset = part.stat().st_size if part.exists() else 0
        digest = hashlib.sha256()
        if offset:
            with part.open("rb") as fh:  # the bytes already here count in the hash
                for block in iter(lambda: fh.read(_CHUNK), b""):
                    digest.update(block)
        headers = {"User-Agent": transfer.user_agent, "Accept-Encoding": "identity"}
        if offset:
            headers["Range"] = f"bytes={offset}-"
        request = urllib.request.Request(planned.url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=transfer.timeout) as response:
                total, append = _response_extent(response, offset, planned)
                if response.headers.get_content_type() == "text/html" and not \
                        planned.entry.name.endswith((".html", ".htm")):  # fmt: skip
                    raise _html_refusal(planned, host, homepage)
                if not append:
                    offset, digest = 0, hashlib.sha256()
                if not started:
                    reporter.start(planned.entry.name, total, offset)
                    started.append(True)
                else:
                    reporter.restart(offset)
                with part.open("ab" if append else "wb") as out:
                    while True:
                        block = response.read(_CHUNK)
                        if not block:
                            break
                        out.write(block)
                        digest.update(block)
                        reporter.advance(len(block))
                size = part.stat().st_size
                if total is not None and size < total:
                    raise http.client.IncompleteRead(b"", total - size)
                return digest.hexdigest(), size
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and offset:
                # The range starts at or past the end: the .part is complete or too long.
                extent = _content_range(exc.headers.get("Content-Range", "").replace("*", "0-0"))
                known = extent[1] if extent else planned.entry.size
                if known is not None and offset == known:
                    return digest.hexdigest(), offset
                part.unlink()
                reporter.line(f"{planned.entry.name}: the partial file does not fit the "
                              "server's; downloading it again")  # fmt: skip
                continue
            raise _http_error(planned, exc) from None
        except urllib.error.URLError as exc:
            # A connection that broke is retried; one refused, or a name that does not
            # resolve, is not going to work a second later.
            if isinstance(exc.reason, (socket.timeout, TimeoutError, ConnectionResetError,
                                       ConnectionAbortedError, BrokenPipeError)):  # fmt: skip
                error: BaseException = exc.reason
            else:
                raise DownloadError(
                    f"Cannot reach {host} for {planned.entry.name} ({exc.reason}). Check the "
                    "network, or give a mirror with --from-url."
                ) from None
        except _DROPPED as exc:
            error = exc
        except OSError as exc:
            if isinstance(exc, (socket.timeout, ConnectionError)):
                error = exc
            else:
                raise DownloadError(os_error_message(part, exc)) from None
        attempt += 1
        have = part.stat().st_size if part.exists() else 0
        if attempt > transfer.retries:
            raise DownloadError(
                f"The connection to {host} broke while downloading {planned.entry.name} "
                f"({type(error).__name__}: {error}) and {transfer.retries} retries did not "
                f"finish it. {human_size(have)} are kept in {part}: run the command again to "
                "resume."
            )
        wait = min(transfer.backoff * 2 ** (attempt - 1), 30.0)
        reporter.line(f"{planned.entry.name}: connection lost at {human_size(have)} "
                      f"({type(error).__name__}); resuming in {wait:.0f} s "
                      f"(retry {attempt}/{transfer.retries})")  # fmt: skip
        time.sleep(wait)


def _response_extent(response: Any, offset: int, planned: Planned) -> tuple[int | None, bool]:
    """(total size or None, whether the body continues the .part) of a response."""
    length = response.headers.get("Content-Length")
    length = int(length) if length and length.isdigit() else None
    if response.status == 206:
        extent = _content_range(response.headers.get("Content-Range"))
        if extent is None or extent[0] != offset:
            raise DownloadError(
                f"The server sent {planned.entry.name} from another offset than asked "
                f"(Content-Range: {response.headers.get('Content-Range')!r}, asked from "
                f"{offset}). Delete {planned.part} and run the command again."
            )
        total = extent[1] if extent[1] is not None else (
            offset + length if length is not None else None)  # fmt: skip
        return total, True
    # 200: the whole file, whether or not a range was asked for.
    return length if length is not None else planned.entry.size, False


def _http_error(planned: Planned, exc: urllib.error.HTTPError) -> DownloadError:
    name = planned.entry.name
    if exc.code == 404:
        return DownloadError(
            f"{planned.url} answered 404 Not Found: {name} is not there. A --from-url mirror "
            f"must hold every file under its manifest name (here BASE/{name}); without "
            "--from-url the publisher has moved it: see the environment card for where it "
            "lives now, and pass --from-url or --manifest."
        )
    if exc.code in (401, 403):
        return DownloadError(
            f"{planned.url} answered {exc.code} {exc.reason}: the host refuses {name} (access "
            "rules or a download quota). Download it by hand, put it at "
            f"{planned.path} and run the command again, or give a mirror with --from-url."
        )
    return DownloadError(f"{planned.url} answered {exc.code} {exc.reason} for {name}; try "
                         "again later, or give a mirror with --from-url.")  # fmt: skip


# --- checks, unpacking and the whole download ----------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _mismatch(planned: Planned, actual: str, where: Path, removed: bool) -> DownloadError:
    fate = ("It was deleted: run the command again to download it afresh." if removed
            else f"Delete {where} and run the command again.")  # fmt: skip
    return DownloadError(
        f"{planned.entry.name} is corrupted or not the published file: sha256 {actual}, "
        f"expected {planned.expected} (from {planned.expected_from}). {fate} If the publisher "
        f"replaced the file on purpose, pin the new hash with --sha256 "
        f"{planned.entry.name}=HEX."
    )


def unpack_zip(archive: Path, dest: Path, sha256: str) -> None:
    """Extract ``archive`` into ``dest`` once per archive content: members go through a
    hidden folder and replace the entries of the same names, and a marker holding the
    archive's hash makes a rerun skip it."""
    marker = dest / f".{archive.name}.unpacked"
    if marker.is_file() and marker.read_text().strip() == sha256:
        return
    staging = dest / f".{archive.name}.unpacking"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                parts = PurePosixPath(member).parts
                if PurePosixPath(member).is_absolute() or ".." in parts or "\\" in member:
                    raise DownloadError(
                        f"{archive} holds the member {member!r}, which would land outside "
                        "the download folder; it is refused."
                    )
            zf.extractall(staging)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise DownloadError(f"{archive} is not a readable zip archive ({exc}). Delete it and "
                            "run the command again.") from None  # fmt: skip
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


@dataclass(frozen=True)
class Fetched:
    """A file that is in place and checked."""

    name: str
    path: Path
    sha256: str
    size: int
    downloaded: bool
    first_use: bool  # its hash was recorded now (no published hash)


def download_all(
    manifest: Manifest,
    planned: list[Planned],
    dest: Path,
    reporter: Reporter,
    transfer: Transfer | None = None,
) -> list[Fetched]:
    """Download (or verify) every planned file, then unpack the archives; stops at the first
    problem with a DownloadError (files already finished stay, each checked)."""
    transfer = transfer or Transfer()
    dest.mkdir(parents=True, exist_ok=True)
    lock = Lock.read(dest)
    done = []
    for p in planned:
        if p.present:
            reporter.line(f"{p.entry.name}: already here, verifying")
            actual, size = sha256_of(p.path), p.path.stat().st_size
            if p.expected and actual != p.expected:
                raise _mismatch(p, actual, p.path, removed=False)
            downloaded = False
        else:
            actual, size = fetch(p, reporter, transfer, manifest.homepage)
            if p.entry.size is not None and size != p.entry.size and p.expected is None:
                p.part.unlink()
                raise DownloadError(
                    f"{p.entry.name} has {size} bytes, expected {p.entry.size} (from the "
                    f"{manifest.family} manifest): the download is damaged or the file is not "
                    "the published one. It was deleted: run the command again to download it "
                    "afresh."
                )
            if p.expected and actual != p.expected:
                p.part.unlink()
                raise _mismatch(p, actual, p.part, removed=True)
            os.replace(p.part, p.path)
            downloaded = True
        first_use = p.expected is None
        if first_use:
            lock.record(p.entry.name, actual, size, p.url)
            reporter.line(f"{p.entry.name}: the publisher gives no sha256; recorded {actual} "
                          f"in {lock.path} (trust on first use): later copies are checked "
                          "against it")  # fmt: skip
        else:
            reporter.line(f"{p.entry.name}: sha256 verified ({p.expected_from})")
        done.append(Fetched(p.entry.name, p.path, actual, size, downloaded, first_use))
    for p, fetched in zip(planned, done, strict=True):
        if p.entry.unpack == "zip":
            reporter.line(f"{p.entry.name}: unpacking into {dest}")
            unpack_zip(p.path, dest, fetched.sha256)
    return done


def remove_downloads(planned: list[Planned], dest: Path) -> None:
    """Delete the downloaded files and what was unpacked from them (``--remove-downloads``),
    keeping the lock file so that a later download is still checked."""
    for p in planned:
        if p.entry.unpack == "zip" and p.path.is_file():
            with zipfile.ZipFile(p.path) as zf:
                tops = {PurePosixPath(m).parts[0] for m in zf.namelist() if m.strip("/")}
            for top in tops:
                target = dest / top
                if target.is_dir():
                    shutil.rmtree(target, ignore_errors=True)
                elif target.exists():
                    target.unlink()
            (dest / f".{p.path.name}.unpacked").unlink(missing_ok=True)
        p.path.unlink(missing_ok=True)
