"""Content-addressed reuse of trained stages.

A training stage is a pure function of its starting weights, its data, its optimiser
settings, its seed and its step budget. When two runs feed a stage identical inputs (BC in
the stochastic-environment study sees the same D_L whatever the no-op probability; the same
IDM serves IDM labeling and VM-IDM) the stage is trained once and the trained weights are
reused. The key hashes the inputs themselves rather than what a method declares it reads,
so a method cannot get reuse wrong by forgetting a dependency.

A stage is reused only when nothing observed *inside* it depends on the run: stages that are
not evaluated, or policy stages evaluated only at their end. The evaluation after a reused
stage runs as usual, against the run's own environment.

Runs of a sweep execute concurrently (a process pool, Ray, SLURM), and two of them may need
the same stage at once (LAPO's world model serves ``lapo`` and ``lapo_plus`` and every seed
of a game). A stage key is therefore *leased* while it trains (:meth:`StageCache.lease`):
one process trains, the others wait and then restore its entry. The lease is a file beside
the entry, created atomically and only if absent (a hard link of a file holding the
holder's record, the classic lock on NFS and Lustre; ``O_CREAT | O_EXCL`` where there are no
hard links), so it works between the processes of one machine and between machines sharing
the results directory. The holder refreshes the file's modification time every
``LEASE_HEARTBEAT_S`` seconds; a lease whose holder died (same machine, pid gone) or whose
heartbeat is older than ``LEASE_STALE_S`` is taken over. The machines' clocks must agree
to well within ``LEASE_STALE_S`` (NTP does; SLURM and Ray need it anyway).

:meth:`StageCache.once` is the pattern for one stage. Waiting while holding a lease is
safe when the held stage depends on the awaited one (a stage trained inside another's
training): no process can wait the other way round. Code that holds leases on unrelated
stages at once (``ssilbench.train.batched``) must never wait while it holds them, or two
such processes could each wait for the other: take the leases it can get with
``cache.lease(key, wait=False)`` (restoring where an entry appeared meanwhile), train and
save those, release them, and only then call :meth:`StageCache.once` for the others, one
by one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import random
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ssilbench.data.batches import RowSource, fingerprint
from ssilbench.train.budget import StageBudget
from ssilbench.train.checkpoint import save_atomic

# Bump when a trainer's computation changes, so that older entries are never reused.
FORMAT = 1
SUFFIX = ".stage.pt"
ROWS_SUFFIX = ".rows.npy"  # arrays computed from a stage: labels, latents (train.artifacts)
META_SUFFIX = ".meta.json"  # what an entry is, readable without loading it
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


def _digest_tensor(h: Any, t: torch.Tensor) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def _digest_rows(h: Any, source: RowSource) -> None:
    if isinstance(source, torch.Tensor):  # by content, as always: existing keys stay valid
        _digest_tensor(h, source)
    else:  # frames read from the store: hashing them again would read the whole view
        h.update(f"rows|{fingerprint(source)}|".encode())


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path
    size: int
    last_used: float
    meta: dict[str, Any]


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
        if _older_than(guard, GUARD_STALE_S):
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


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime > seconds
    except FileNotFoundError:
        return False


class StageCache:
    """Trained stage weights on disk, one file per key under ``root``."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def key(
        self,
        trainer: str,
        net: nn.Module,
        tensors: Iterable[RowSource],
        settings: dict[str, Any],
        device: torch.device,
    ) -> str:
        """The hash of everything that determines the trained weights. ``tensors`` are
        hashed by content; other row sources by their fingerprint."""
        h = hashlib.sha256()
        head = {"format": FORMAT, "trainer": trainer, "device": device.type,
                "torch": torch.__version__.split("+")[0], **settings}  # fmt: skip
        h.update(json.dumps(head, sort_keys=True, default=repr).encode())
        for name, value in net.state_dict().items():
            h.update(name.encode())
            _digest_tensor(h, value)
        for t in tensors:
            _digest_rows(h, t)
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}{SUFFIX}"

    def restore(self, key: str, net: nn.Module, budget: StageBudget) -> bool:
        """Load the entry into ``net`` and replay its step accounting on ``budget``."""
        path = self._path(key)
        try:
            entry = torch.load(path, map_location="cpu", weights_only=True)
        except FileNotFoundError:
            return False
        except Exception:  # a damaged entry is a miss; the stage trains and rewrites it
            return False
        net.load_state_dict(entry["state"])
        os.utime(path)  # last use, for `ssilbench cache gc`
        budget.replay(int(entry["used"]), entry["stopped_early"], reused=key[:12])
        return True

    def save(self, key: str, net: nn.Module, budget: StageBudget) -> None:
        """Write atomically: a reader never sees half an entry. Beside it, what it is (the
        stage, and for a shared stage its identity, :func:`share_identity`)."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        meta = {"stage": budget.stage.name, "saved": time.time()}
        if budget.stage.share:
            meta["identity"] = share_identity(budget.stage, budget.plan.scope)
        entry = {
            "state": {k: v.detach().cpu() for k, v in net.state_dict().items()},
            "used": budget.used,
            "stopped_early": budget.stopped_early,
            "meta": json.dumps(meta),
        }
        self.describe(key, meta)
        save_atomic(entry, path)

    def describe(self, key: str, meta: dict[str, Any]) -> None:
        """Write the entry's description (``<key>.meta.json``) atomically."""
        path = self.root / key[:2] / f"{key}{META_SUFFIX}"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps(meta, sort_keys=True))
        os.replace(tmp, path)

    def _meta(self, path: Path, key: str) -> dict[str, Any]:
        try:
            return json.loads((path.parent / f"{key}{META_SUFFIX}").read_text())
        except (OSError, ValueError):
            pass
        if path.name.endswith(ROWS_SUFFIX):
            return {"stage": "labels"}
        try:  # an entry written before descriptions were kept beside it
            return json.loads(torch.load(path, map_location="cpu", weights_only=True)["meta"])
        except Exception:
            return {"damaged": True}

    def entries(self) -> list[CacheEntry]:
        """Trained stages and the arrays computed from them (labels, latents)."""
        out = []
        for suffix in (SUFFIX, ROWS_SUFFIX):
            for path in sorted(self.root.glob(f"*/*{suffix}")):
                key = path.name[: -len(suffix)]
                stat = path.stat()
                out.append(CacheEntry(key, path, stat.st_size, stat.st_mtime,
                                      self._meta(path, key)))  # fmt: skip
        return out

    def shared_identities(self) -> set[str]:
        """The identities of the shared stages kept here (see :func:`share_identity`)."""
        out = set()
        for path in self.root.glob(f"*/*{META_SUFFIX}"):
            try:
                identity = json.loads(path.read_text()).get("identity")
            except (OSError, ValueError, AttributeError):
                continue
            if identity and path.with_name(path.name[: -len(META_SUFFIX)] + SUFFIX).exists():
                out.add(identity)
        return out

    def gc(self, older_than_s: float = 0.0) -> list[CacheEntry]:
        """Delete the entries not used for ``older_than_s`` seconds, and stale leases;
        returns the entries deleted. Leases held by live processes are kept."""
        now = time.time()
        removed = [e for e in self.entries() if now - e.last_used >= older_than_s]
        for e in removed:
            e.path.unlink(missing_ok=True)
            (e.path.parent / f"{e.key}{META_SUFFIX}").unlink(missing_ok=True)
        self.remove_stale_leases()
        for tmp in self.root.glob("*/*.tmp"):
            # A recent one may be an entry being saved right now (torch.save keeps touching
            # it): deleting it would fail that save after hours of training.
            if _older_than(tmp, LEASE_STALE_S):
                tmp.unlink(missing_ok=True)
        return removed

    def once(
        self,
        key: str,
        net: nn.Module,
        budget: StageBudget,
        train: Callable[[], object],
        *,
        log: Log | None = None,
    ) -> bool:
        """Restore ``net`` from the entry ``key`` (replaying its step accounting on
        ``budget``), or ``train()`` it and save it there, training each key once across
        concurrent processes and machines: under the key's lease, restore if the entry
        exists, else train and save. A process that finds the key leased waits for the
        holder (see :meth:`acquire`; ``log`` hears whom it waits for), then restores its
        entry, or trains if the holder failed. Returns whether ``net`` was restored.

        Never call it while holding leases on unrelated stages (see the module
        docstring)."""
        if self.restore(key, net, budget):  # the common case needs no lease
            return True
        with self.lease(key, log=log):
            if self.restore(key, net, budget):
                return True
            train()
            self.save(key, net, budget)
        return False

    def _lease_path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}{LEASE_SUFFIX}"

    def acquire(self, key: str, *, wait: bool = True, log: Log | None = None) -> Lease | None:
        """The lease on ``key``; call :meth:`Lease.release` when done (or use it in a
        ``with`` block, or use :meth:`lease`).

        When another live process (or thread) holds it: with ``wait`` poll every
        ``LEASE_POLL_S`` seconds (jittered, so that waiters do not poll in step) until it
        is released or found stale, logging once whom it waits for; without ``wait``
        return None at once. A stale lease (its holder's process is gone, or its heartbeat
        is older than ``LEASE_STALE_S``) is taken over. ``log`` receives the messages
        (standard error by default, so that a waiting worker does not look hung).

        Leases are not re-entrant: waiting for a lease the calling thread holds raises
        RuntimeError; asking without ``wait`` returns None."""
        log = log or _stderr
        path = self._lease_path(key)
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
                told = True
            time.sleep(LEASE_POLL_S * random.uniform(0.5, 1.5))

    @contextmanager
    def lease(self, key: str, wait: bool = True, log: Log | None = None) -> Iterator[Lease | None]:
        """:meth:`acquire` as a context manager: yields the lease (None only without
        ``wait``, while another holds it) and releases it at the end of the block, also
        when the block raises, so that a waiter then trains the stage instead."""
        held = self.acquire(key, wait=wait, log=log)
        try:
            yield held
        finally:
            if held is not None:
                held.release()

    def leases(self) -> list[LeaseInfo]:
        """The leases on disk, live and stale: the stages being trained now."""
        out = []
        for path in sorted(self.root.glob(f"*/*{LEASE_SUFFIX}")):
            info = _read_lease(path, path.name[: -len(LEASE_SUFFIX)])
            if info is not None:
                out.append(info)
        return out

    def remove_stale_leases(self) -> list[LeaseInfo]:
        """Delete the leases whose holders are gone (see :meth:`acquire`); returns them."""
        removed = [
            info for info in self.leases() if info.stale() and _remove_if(
                info.path, info.key, lambda o, seen=info.snapshot: o.snapshot == seen)
        ]  # fmt: skip
        # Left by a process killed while removing a lease; a recent one may be in use.
        for guard in self.root.glob(f"*/*{LEASE_SUFFIX}{GUARD_SUFFIX}"):
            if _older_than(guard, GUARD_STALE_S):
                guard.unlink(missing_ok=True)
        return removed


def share_identity(stage: Any, scope: dict[str, Any]) -> str:
    """A shared stage (``Stage.share``) for one run: its declared identity with the part of
    the run's scope (``StagePlan.scope``: task, dataset, and the axes in ``stage.per``) it
    depends on. Runs with equal identities train the same stage."""
    keys = ("env", "data", *stage.per)
    return json.dumps([stage.share, {k: scope.get(k) for k in keys}], sort_keys=True)


def reusable(budget: StageBudget) -> StageCache | None:
    """The run's cache when this stage's result may be reused (see the module docstring)."""
    cache = budget.plan.cache
    if cache is None or budget.used:
        return None
    evaluated_inside = budget.stage.policy and budget.policy is not None and (
        budget.plan.eval_every < budget.stage.steps
    )  # fmt: skip
    return None if evaluated_inside else cache


def stage_key(
    cache: StageCache,
    trainer: str,
    net: nn.Module,
    inputs: RowSource,
    targets: RowSource,
    budget: StageBudget,
    *,
    lr: float,
    batch_size: int,
    seed: int,
    rule: Any,
    schedule: Any = None,
    speed: Any = None,
) -> str:
    """The key of one supervised stage (``trainer``: "classifier" or "regressor"), the same
    whether the run is trained alone or stacked with others."""
    settings = {"lr": lr, "batch": min(batch_size, len(inputs)), "seed": seed,
                "steps": budget.stage.steps, "rule": repr(rule)}  # fmt: skip
    if schedule is not None:  # keys of unscheduled stages stay as they were
        settings["schedule"] = repr(schedule)
    if getattr(speed, "enabled", False):  # as must those of float32 stages
        settings["speed"] = repr(speed)
    # A row source's rows are tensors on its device: one row says which.
    device = inputs.device
    return cache.key(trainer, net, [inputs, targets], settings, device)


def reuse_or_train(
    trainer: str,
    net: nn.Module,
    tensors: list[torch.Tensor],
    settings: dict,
    budget: StageBudget,
    device: torch.device,
    train: Callable[[], None],
    *,
    log: Log | None = None,
) -> bool:
    """Restore ``net`` from the stage cache when an identical stage was trained before,
    else ``train()`` it and keep the result. Returns whether it was reused. Concurrent runs
    that need the same stage train it once (:meth:`StageCache.once`; ``log``: where a
    waiting run says whom it waits for, standard error by default).

    The key is the content of what determines the weights: ``net``'s starting weights, the
    ``tensors`` it is trained on (hashed where they are, e.g. on the CPU before they move),
    the ``settings``, the ``device`` type and the stage's step budget. What a
    method does not pass (its name, the label budget, the run seed when the stage does not
    use it) cannot split the cache.
    """
    cache: StageCache | None = reusable(budget)
    if cache is None:
        train()
        return False
    key = cache.key(trainer, net, tensors, {**settings, "steps": budget.stage.steps}, device)
    return cache.once(key, net, budget, train, log=log)
