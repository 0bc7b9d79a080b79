"""The HTTP side of ``ssilbench data download``: one file streamed into ``NAME.part`` with
resume (Range requests), retries of a dropped connection, and one clear message for each
way a host can refuse.

The caller holds the file's download lock (:mod:`ssilbench.data.download_state`), so no
other process writes the ``.part`` meanwhile, and checks the bytes on disk afterwards.
"""

from __future__ import annotations

import http.client
import re
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ssilbench.data.download_state import DownloadError, move_aside
from ssilbench.errors import os_error_message

_CHUNK = 1 << 20  # bytes read per call: large enough for speed, small enough for progress


def human_size(n: int | float) -> str:
    """1234567 -> '1.2 MB' (decimal units, as publishers and download tools state sizes)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class Reporter(Protocol):
    """Where a download reports its progress (see ssilbench.cli.download_progress)."""

    def line(self, text: str) -> None: ...
    def start(self, name: str, total: int | None, done: int) -> None: ...
    def advance(self, n: int) -> None: ...
    def restart(self, done: int) -> None: ...
    def finish(self, ok: bool = True) -> None: ...


class Entry(Protocol):
    name: str
    size: int | None


class Target(Protocol):
    """What is fetched: a manifest entry, its URL, its place and its ``.part``."""

    @property
    def entry(self) -> Entry: ...
    @property
    def url(self) -> str: ...
    @property
    def path(self) -> Path: ...
    @property
    def part(self) -> Path: ...


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


def _html_refusal(planned: Target, host: str, manifest_home: str) -> DownloadError:
    where = f" from {manifest_home}" if manifest_home else ""
    return DownloadError(
        f"{host} answered with a web page instead of {planned.entry.name} ({planned.url}). "
        "Hosts such as Google Drive do this when a file's download quota is exceeded or it "
        f"needs a browser. Download it by hand{where}, put it at {planned.path} and run the "
        "command again (a complete file there is verified and used), or give a mirror with "
        "--from-url."
    )


def fetch(
    planned: Target,
    reporter: Reporter,
    transfer: Transfer,
    homepage: str = "",
) -> int:
    """Stream ``planned.url`` into ``planned.part``, resuming what is there; returns the size
    of the complete ``.part`` (not yet checked nor renamed: the caller hashes the bytes on
    disk, which the download lock keeps from any other writer)."""
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
    planned: Target, reporter: Reporter, transfer: Transfer, homepage: str, started: list[bool]
) -> int:
    part = planned.part
    part.parent.mkdir(parents=True, exist_ok=True)
    host = urllib.parse.urlsplit(planned.url).netloc
    attempt = 0
    while True:
        offset = part.stat().st_size if part.exists() else 0
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
                    offset = 0
                if not started:
                    reporter.start(planned.entry.name, total, offset)
                    started.append(True)
                else:
                    reporter.restart(offset)
                with part.open("ab" if append else "wb") as out:
                    while block := response.read(_CHUNK):
                        out.write(block)
                        reporter.advance(len(block))
                size = part.stat().st_size
                if total is not None and size < total:
                    raise http.client.IncompleteRead(b"", total - size)
                return size
        except urllib.error.HTTPError as exc:
            if exc.code == 416 and offset:
                # The range starts at or past the end: the .part is complete or too long.
                extent = _content_range(exc.headers.get("Content-Range", "").replace("*", "0-0"))
                known = extent[1] if extent else planned.entry.size
                if known is not None and offset == known:
                    return offset
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


def _response_extent(response: Any, offset: int, planned: Target) -> tuple[int | None, bool]:
    """(total size or None, whether the body continues the .part) of a response."""
    length = response.headers.get("Content-Length")
    length = int(length) if length and length.isdigit() else None
    if response.status == 206:
        extent = _content_range(response.headers.get("Content-Range"))
        if extent is None or extent[0] != offset:
            moved = move_aside(planned.part, planned.path)
            raise DownloadError(
                f"The server sent {planned.entry.name} from another offset than asked "
                f"(Content-Range: {response.headers.get('Content-Range')!r}, asked from "
                f"{offset}). The partial file was moved aside to {moved}: run the command "
                "again to download it from the start."
            )
        total = extent[1] if extent[1] is not None else (
            offset + length if length is not None else None)  # fmt: skip
        return total, True
    # 200: the whole file, whether or not a range was asked for.
    return length if length is not None else planned.entry.size, False


def _http_error(planned: Target, exc: urllib.error.HTTPError) -> DownloadError:
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
