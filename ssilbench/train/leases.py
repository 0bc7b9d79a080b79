"""Leases on stage keys: one process trains a stage while the others wait for it.

A lease is a file beside the stage's cache entry, created atomically and only if absent (a
hard link of a file holding the holder's record, the classic lock on NFS and Lustre;
``O_CREAT | O_EXCL`` where there are no hard links), so it works between the processes of
one machine and between machines sharing the results directory. The holder refreshes the
file's modification time every ``LEASE_HEARTBEAT_S`` seconds; a lease whose holder died
(same machine, pid gone), whose heartbeat is older than ``LEASE_STALE_S``, or whose
heartbeat a waiter has watched stand still for ``LEASE_STALE_S`` on its own clock is taken
over. The last rule makes a lease from a host whose clock runs ahead (its heartbeat in this
host's future) stale after the same limit, measured here. See
:mod:`ssilbench.train.memo` for how stages use them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LEASE_SUFFIX = ".lease"
GUARD_SUFFIX = ".guard"  # held while a lease file is checked and removed (see _remove_if)

# Lease timing, in seconds (module-level so that tests can shorten them). The heartbeat is
# far shorter than the staleness timeout so that a few missed beats (a busy file server)
# never make a live holder look dead.
LEASE_HEARTBEAT_S = 10.0
LEASE_STALE_S = 120.0
LEASE_POLL_S = 0.5
GUARD_STALE_S = 10.0  # a guard is held for microseconds; an old one is a dead process's

Log = Callable[[str], None]


@dataclass(frozen=True)
class LeaseInfo:
    """The lease on one key as read from its file: who trains the stage, since when."""

    key: str
    path: Path
    host: str | None
    pid: int | None
    started: float | None
    heartbeat: float  # the file's modification time, refreshed while the holder lives
    token: str | None
    pidns: str | None
    # Content and mtime as read: a breaker removes the file only if it is still this one.
    snapshot: tuple[bytes, int] = field(repr=False, compare=False)

    @property
    def holder(self) -> str:
        return f"{self.host or '?'} pid {self.pid if self.pid is not None else '?'}"

    def why_stale(self) -> str | None:
        """Why the holder is taken for dead, or None while it looks alive."""
        silent = time.time() - self.heartbeat
        if silent > LEASE_STALE_S:
            return f"no heartbeat for {silent:.0f} s"
        # The clocks may disagree (a heartbeat a day ahead of this host's would never look
        # old): a heartbeat this process has watched stand still for the limit, on its own
        # clock, is stale whatever time it claims.
        still = _unchanged_for(self)
        if still > LEASE_STALE_S:
            ahead = (f", and it is {-silent:.0f} s ahead of this host's clock (clock skew)"
                     if silent < 0 else "")  # fmt: skip
            return f"its heartbeat has not moved for {still:.0f} s watched from here{ahead}"
        # A pid means something only in the pid namespace that wrote it (containers sharing
        # a host name do not share pids).
        here = self.host == socket.gethostname() and self.pidns == _pidns()
        if here and self.pid is not None and not _alive(self.pid):
            return "its process is gone"
        return None

    def stale(self) -> bool:
        return self.why_stale() is not None


class Lease:
    """A held lease on one stage key (from :meth:`StageCache.acquire`): other processes that
    ask for the key wait until :meth:`release`, or the end of a ``with`` block. While held,
    a daemon thread refreshes the lease file's modification time every
    ``LEASE_HEARTBEAT_S`` seconds; it marks the lease ``lost`` if the file stops being this
    lease's (another process judged it stale and took it over)."""

    def __init__(self, key: str, path: Path, token: str, log: Log) -> None:
        self.key = key
        self.path = path
        self.token = token
        self.lost = False
        self._log = log
        self._done = threading.Event()
        self._beats = threading.Thread(target=self._heartbeat, name=f"lease-{key[:12]}",
                                       daemon=True)  # fmt: skip
        _hold(path, token)
        self._beats.start()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def owned(self) -> bool:
        info = _read_lease(self.path, self.key)
        return info is not None and info.token == self.token

    def _heartbeat(self) -> None:
        while not self._done.wait(LEASE_HEARTBEAT_S):
            if not self.owned():
                self.lost = True
                self._log(f"stage {self.key[:12]}: lease taken over by another process "
                          "(this one looked stale); both may train it")  # fmt: skip
                return
            with contextlib.suppress(OSError):  # a missed beat is made up at the next
                os.utime(self.path)

    def release(self) -> None:
        """Give the lease up; idempotent. Removes the lease file only if it is still this
        lease's, never one that another process took over."""
        if self._done.is_set():
            return
        self._done.set()
        self._beats.join()
        _unhold(self.path, self.token)
        if not self.lost:
            _remove_if(self.path, self.key, lambda info: info.token == self.token)


# Per lease file: the heartbeat (mtime in ns) this process last saw there and when it first
# saw it, on this process's monotonic clock.
_SEEN: dict[str, tuple[int, float]] = {}


def _unchanged_for(info: LeaseInfo) -> float:
    """Seconds this process has seen ``info``'s heartbeat stand still (0 when it is new)."""
    now, beat = time.monotonic(), info.snapshot[1]
    seen = _SEEN.get(str(info.path))
    if seen is None or seen[0] != beat:
        _SEEN[str(info.path)] = (beat, now)
        return 0.0
    return now - seen[1]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@functools.lru_cache(maxsize=1)
def _pidns() -> str | None:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:  # not Linux
        return None


def _alive(pid: int) -> bool:
    if pid <= 0 or os.name != "posix":
        return True  # cannot tell: the heartbeat decides
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process
        return True
    try:  # a killed worker that its parent has not reaped yet is a zombie: dead too
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _read_lease(path: Path, key: str) -> LeaseInfo | None:
    """The lease file at ``path``, or None when there is none."""
    try:
        with open(path, "rb") as fh:  # opening revalidates NFS's cached attributes
            raw = fh.read()
            mtime_ns = os.fstat(fh.fileno()).st_mtime_ns
    except FileNotFoundError:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:  # being written, or damaged: judged by its heartbeat alone
        doc = None
    doc = doc if isinstance(doc, dict) else {}

    def get(name: str, kind: type) -> Any:
        value = doc.get(name)
        return value if isinstance(value, kind) and not isinstance(value, bool) else None

    return LeaseInfo(key, path, get("host", str), get("pid", int), get("started", (int, float)),
                     mtime_ns / 1e9, get("token", str), get("pidns", str),
                     (raw, mtime_ns))  # fmt: skip


def _create(key: str, path: Path, log: Log) -> Lease | None:
    """The lease on ``key`` if no one holds it, else None."""
    token = uuid.uuid4().hex
    record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                         "started": time.time(), "pidns": _pidns(), "token": token})  # fmt: skip
    if not _place(path, key, record, token):
        return None
    return Lease(key, path, token, log)


def _place(path: Path, key: str, record: str, token: str) -> bool:
    """Create ``path`` holding ``record`` if it does not exist; returns whether it did.

    The record is written to a private file first and hard-linked into place: the link is
    atomic and refused when the file exists (on NFS too, where it is the classic lock), and
    a reader never finds a file that does not yet say who made it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    draft = path.with_name(f".{path.name}.{token}.tmp")
    draft.write_text(record)
    try:
        os.link(draft, path)
    except FileExistsError:
        # NFS answers a retried link whose first try succeeded with EEXIST: the token tells.
        info = _read_lease(path, key)
        return info is not None and info.token == token
    except OSError:  # a file system without hard links
        return _create_exclusive(path, record)
    finally:
        draft.unlink(missing_ok=True)
    return True


def _create_exclusive(path: Path, record: str) -> bool:
    """``O_CREAT | O_EXCL``, then the record (a waiter may see it empty for a moment)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(record)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return True


def _remove_if(path: Path, key: str, ours: Callable[[LeaseInfo], bool]) -> bool:
    """Remove the lease file at ``path`` if ``ours`` accepts it; returns whether it did.

    Checking and then unlinking would race with another process doing the same: between
    the two, it may remove the stale lease and create its own, which the unlink would then
    delete. Moving the file aside to check it would leave the key free for a moment, and a
    third process could take it beside the one moved aside. So every removal of a lease
    file happens under a short-lived guard file (see :func:`_guard`); creating a lease
    needs no guard, since it only succeeds where there is no file."""
    with _guard(path.with_name(path.name + GUARD_SUFFIX), key):
        info = _read_lease(path, key)
        if info is None or not ours(info):
            return False
        path.unlink(missing_ok=True)
        return True


@contextmanager
def _guard(guard: Path, key: str) -> Iterator[None]:
    """Hold ``guard`` (a file beside a lease) for the few microseconds of a check and an
    unlink. A guard older than ``GUARD_STALE_S`` was left by a process killed inside that
    window and is removed."""
    token = uuid.uuid4().hex
    while not _place(guard, key, json.dumps({"token": token, "pid": os.getpid()}), token):
        if older_than(guard, GUARD_STALE_S):
            guard.unlink(missing_ok=True)
        else:
            time.sleep(random.uniform(0.001, 0.01))
    try:
        yield
    finally:
        guard.unlink(missing_ok=True)


# Leases this process holds, by lease file: the process (a forked child inherits this
# dict), the thread that took it and its token. A thread that would wait for a lease it
# holds itself would wait forever.
_HELD: dict[str, tuple[int, int, str]] = {}
_HELD_LOCK = threading.Lock()


def _hold(path: Path, token: str) -> None:
    with _HELD_LOCK:
        _HELD[str(path)] = (os.getpid(), threading.get_ident(), token)


def _unhold(path: Path, token: str) -> None:
    with _HELD_LOCK:
        if _HELD.get(str(path), (0, 0, ""))[2] == token:  # not a later holder's entry
            del _HELD[str(path)]


def _held_by_this_thread(path: Path) -> bool:
    with _HELD_LOCK:
        return _HELD.get(str(path), (0, 0, ""))[:2] == (os.getpid(), threading.get_ident())


def older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except FileNotFoundError:
        return False


def acquire(
    path: Path,
    key: str,
    *,
    wait: bool = True,
    log: Log | None = None,
    on_wait: Callable[[LeaseInfo], None] | None = None,
) -> Lease | None:
    """The lease on ``key`` (its file at ``path``); call :meth:`Lease.release` when done
    (or use it in a ``with`` block, or use :meth:`StageCache.lease`).

    When another live process (or thread) holds it: with ``wait`` poll every
    ``LEASE_POLL_S`` seconds (jittered, so that waiters do not poll in step) until it
    is released or found stale, logging once whom it waits for (and telling ``on_wait``
    the holder's lease); without ``wait``
    return None at once. A stale lease (its holder's process is gone, or its heartbeat
    is older than ``LEASE_STALE_S``) is taken over. ``log`` receives the messages
    (standard error by default, so that a waiting worker does not look hung).

    Leases are not re-entrant: waiting for a lease the calling thread holds raises
    RuntimeError; asking without ``wait`` returns None."""
    log = log or _stderr
    if wait and _held_by_this_thread(path):
        raise RuntimeError(f"stage {key[:12]}: this thread holds its lease already, "
                           "and would wait for itself forever")  # fmt: skip
    told = False
    while True:
        lease = _create(key, path, log)
        if lease is not None:
            return lease
        holder = _read_lease(path, key)
        if holder is None:
            continue  # released between the two looks: ask again
        why = holder.why_stale()
        if why is not None:
            log(f"stage {key[:12]}: breaking the stale lease of {holder.holder} ({why})")
            _remove_if(path, key, lambda info, seen=holder.snapshot: info.snapshot == seen)
            continue
        if not wait:
            return None
        if not told:
            since = time.time() - (holder.started or holder.heartbeat)
            log(f"stage {key[:12]} is being trained by {holder.holder} (for {since:.0f} s); "
                "waiting for it")  # fmt: skip
            if on_wait is not None:
                on_wait(holder)
            told = True
        time.sleep(LEASE_POLL_S * random.uniform(0.5, 1.5))


def read_all(root: Path) -> list[LeaseInfo]:
    """The leases on disk under a stage cache's ``root``, live and stale."""
    out = []
    for path in sorted(root.glob(f"*/*{LEASE_SUFFIX}")):
        info = _read_lease(path, path.name[: -len(LEASE_SUFFIX)])
        if info is not None:
            out.append(info)
    return out


def ahead_of_clock(infos: list[LeaseInfo]) -> list[LeaseInfo]:
    """The live-looking leases whose heartbeat is ahead of this host's clock: their holders'
    clocks disagree with this one, so their age says nothing (see :func:`watch_stale`)."""
    now = time.time()
    return [info for info in infos if info.heartbeat > now + LEASE_HEARTBEAT_S
            and not info.stale()]  # fmt: skip


def watch_stale(infos: list[LeaseInfo]) -> list[LeaseInfo]:
    """Watch the leases ``infos`` for ``LEASE_STALE_S`` on this host's clock and remove those
    whose heartbeat did not move (a live holder beats every ``LEASE_HEARTBEAT_S``); returns
    the leases removed."""
    watched = {str(info.path): info for info in infos}
    deadline = time.monotonic() + LEASE_STALE_S + 2 * LEASE_POLL_S
    removed = []
    while watched and time.monotonic() < deadline:
        time.sleep(LEASE_POLL_S)
        for name, first in list(watched.items()):
            info = _read_lease(first.path, first.key)
            if info is None or info.snapshot != first.snapshot:
                del watched[name]  # released, or its holder beat: alive
            elif info.stale():
                del watched[name]
                if _remove_if(info.path, info.key, lambda o, s=info.snapshot: o.snapshot == s):
                    removed.append(info)
    return removed


def remove_stale(root: Path, infos: list[LeaseInfo]) -> list[LeaseInfo]:
    """Delete those of the leases ``infos`` (read under ``root``) whose holders are gone,
    and guards left by killed processes; returns the leases removed."""
    removed = [
        info for info in infos if info.stale() and _remove_if(
            info.path, info.key, lambda o, seen=info.snapshot: o.snapshot == seen)
    ]  # fmt: skip
    # Left by a process killed while removing a lease; a recent one may be in use.
    for guard in root.glob(f"*/*{LEASE_SUFFIX}{GUARD_SUFFIX}"):
        if older_than(guard, GUARD_STALE_S):
            guard.unlink(missing_ok=True)
    return removed
