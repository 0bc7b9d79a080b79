"""A local HTTP server for a folder, with Range requests, for testing downloads.

``ssilbench data download --from-url`` is tested against it (and a plugin's tests can check
their ``downloads.toml`` the same way, through :mod:`ssilbench.testing`): it serves the files
under ``root`` on 127.0.0.1, answers ``Range: bytes=A-`` and ``bytes=A-B`` with 206, records
every request's path and headers, and can misbehave on purpose: drop the connection after
some bytes of a file, send a file without its length, ignore ranges, answer with a web page
as a quota-limited host does, or hold every file back until the test lets it go (so that
two clients overlap).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from urllib.parse import unquote, urlsplit

_BLOCK = 1 << 20  # bytes sent per write


@dataclass(frozen=True)
class Seen:
    """One request the server answered: method, path (unquoted, without the query) and
    headers (names lower-cased)."""

    method: str
    path: str
    headers: dict[str, str]

    @property
    def range(self) -> str | None:
        return self.headers.get("range")


@dataclass
class LocalServer:
    """Serves ``root`` on ``127.0.0.1`` in a thread; use it as a context manager.

    ``drop_after``: file path -> bytes after which the next GET of that file is cut (the
    full Content-Length is announced, then the connection closes), once per entry.
    ``no_length``: paths sent without Content-Length, their end marked only by the closed
    connection (so a cut is invisible to the client). ``ranges``: False to ignore Range
    headers (200 with the whole file). ``html``: paths answered with a 200 web page instead
    of the file. ``gate``: an event every file's bytes wait for (headers are sent at once).
    """

    root: Path
    drop_after: dict[str, int] = field(default_factory=dict)
    no_length: set[str] = field(default_factory=set)
    ranges: bool = True
    html: set[str] = field(default_factory=set)
    gate: threading.Event | None = None
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = Path(self.root).resolve()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        assert self._server is not None, "the server is not running"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def gets(self, path: str) -> list[Seen]:
        """The GET requests of ``path`` (as served, e.g. ``"bigfish.zip"``), in order."""
        with self._lock:
            return [r for r in self.requests if r.method == "GET" and r.path == path]

    def __enter__(self) -> LocalServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass  # keep test output clean

            def do_HEAD(self) -> None:  # noqa: N802
                owner._answer(self, body=False)

            def do_GET(self) -> None:  # noqa: N802
                owner._answer(self, body=True)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # --- answering ------------------------------------------------------------------------

    def _answer(self, handler: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlsplit(handler.path).path).lstrip("/")
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with self._lock:
            self.requests.append(Seen(handler.command, path, headers))
        target = (self.root / path).resolve()
        if not target.is_relative_to(self.root) or not target.is_file():
            self._send(handler, 404, b"not found\n", "text/plain")
            return
        if path in self.html:
            page = b"<html><body>Quota exceeded: too many users viewed this file.</body></html>"
            self._send(handler, 200, page if body else b"", "text/html; charset=utf-8")
            return
        size = target.stat().st_size
        start, end, status = 0, size - 1, 200
        wanted = headers.get("range")
        if wanted and self.ranges:
            match = re.fullmatch(r"bytes=(\d+)-(\d*)", wanted.strip())
            if match:
                start = int(match.group(1))
                end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
                if start >= size or start > end:
                    handler.send_response(416)
                    handler.send_header("Content-Range", f"bytes */{size}")
                    handler.send_header("Content-Length", "0")
                    handler.end_headers()
                    return
                status = 206
        handler.send_response(status)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Accept-Ranges", "bytes" if self.ranges else "none")
        if path in self.no_length:
            handler.send_header("Connection", "close")
            handler.close_connection = True
        else:
            handler.send_header("Content-Length", str(end - start + 1))
        if status == 206:
            handler.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        handler.end_headers()
        if not body:
            return
        if self.gate is not None:
            self.gate.wait(timeout=120)
        with self._lock:
            cut = self.drop_after.pop(path, None)
        length = end - start + 1
        # Streamed a block at a time (the files may be large: a benchmark serves 64 MB), and
        # with a cut, announced whole, sent in part, then hung up: a dropped connection.
        with target.open("rb") as fh:
            fh.seek(start)
            sent, limit = 0, length if cut is None else min(cut, length)
            while sent < limit:
                block = fh.read(min(_BLOCK, limit - sent))
                if not block:
                    break
                handler.wfile.write(block)
                sent += len(block)
        if cut is not None and cut < length:
            handler.wfile.flush()
            handler.close_connection = True
            try:
                import socket

                handler.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, payload: bytes, kind: str) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", kind)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)
