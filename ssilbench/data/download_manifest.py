"""The manifest of an environment family's published data (``downloads.toml``, format
``ssilbench.downloads`` v1) and the plan of a download: each file's URL, place and expected
hash, and the lines shown before it starts. See :mod:`ssilbench.data.download`."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ssilbench.data.download_fetch import human_size
from ssilbench.data.download_state import (
    Lock,
    part_path,
)
from ssilbench.errors import UsageError, os_error_message

FORMAT = "ssilbench.downloads"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


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
    expected_from: str  # "the manifest", "--sha256", "the lock file ...", "" (first use)
    present: bool  # complete in the folder already (verified before use)
    partial: int  # bytes of a .part left by an interrupted download
    pinned: bool = False  # expected comes from --sha256 or the manifest, not the lock file

    @property
    def part(self) -> Path:
        return part_path(self.path)


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
            expected, source = lock.files[entry.name]["sha256"], lock.where(entry.name)
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
            pinned=entry.name in pins or bool(entry.sha256),
        ))  # fmt: skip
    return planned


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
