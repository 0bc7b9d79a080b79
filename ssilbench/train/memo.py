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
``LEASE_HEARTBEAT_S`` seconds; a lease whose holder died (same machine, pid gone), whose
heartbeat is older than ``LEASE_STALE_S``, or whose heartbeat a waiter watched stand still
for ``LEASE_STALE_S`` on its own clock (a host whose clock runs ahead) is taken over.

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
import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import torch
from torch import nn

from ssilbench.data.batches import RowSource, fingerprint
from ssilbench.stages import StageBudget
from ssilbench.train import leases as lease_files
from ssilbench.train.checkpoint import save_atomic, write_error
from ssilbench.train.leases import Lease, LeaseInfo, Log

if TYPE_CHECKING:
    from ssilbench.stages import StoppingRule, WarmupLinear
    from ssilbench.train.speed import Speed

# Bump when a trainer's computation changes, so that older entries are never reused.
FORMAT = 1
SUFFIX = ".stage.pt"
ROWS_SUFFIX = ".rows.npy"  # arrays computed from a stage: labels, latents (train.artifacts)
META_SUFFIX = ".meta.json"  # what an entry is, readable without loading it


def _digest_tensor(h: Any, t: torch.Tensor) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
    # reshape(-1): a 0-d tensor (BatchNorm's num_batches_tracked) cannot be viewed as bytes
    h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


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


def module_code(net: nn.Module) -> dict[str, str]:
    """Import package -> fingerprint of each package, torch's and the core's aside, that
    defines one of ``net``'s modules: the code of its forward pass (a plugin's own layers)."""
    from ssilbench.fingerprint import CORE_PACKAGE, package_fingerprint, top_package

    packages = {top_package(type(m).__module__) for m in net.modules()}
    packages -= {"torch", CORE_PACKAGE, "builtins", "__main__"}
    return {p: package_fingerprint(p) for p in sorted(packages)}


class StageCache:
    """Trained stage weights on disk, one file per key under ``root``.

    A key holds the code that computes the stage, so that a stage trained by other code is
    never reused: the fingerprints of the packages that define the network's modules, and
    ``code`` (plugin -> fingerprint: a run's architecture plugins, whose ``build`` made the
    network; see ``ssilbench.runner.worker.set_up_run``). Runs of other methods that train
    the same network on the same data still share the stage."""

    def __init__(self, root: str | os.PathLike, code: dict[str, str] | None = None) -> None:
        self.root = Path(root)
        self.code = dict(code or {})
        self.on_phase: Callable[..., None] | None = None
        """Told what the run using this cache does meanwhile (``on_phase(name, detail,
        holder)``): labelling rows, waiting for a stage another process trains."""

    def say(self, phase: str, detail: str = "", holder: dict[str, Any] | None = None) -> None:
        """Pass a phase to :attr:`on_phase`, if anyone listens."""
        if self.on_phase is not None:
            self.on_phase(phase, detail, holder)

    def waiting(self, what: str) -> Callable[[LeaseInfo], None]:
        """What :meth:`lease` calls when it starts waiting for another holder of ``what``."""
        return lambda info: self.say("waiting", what, {"host": info.host, "pid": info.pid})

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
        code = {**{f"plugin {k}": v for k, v in self.code.items()},
                **{f"package {k}": v for k, v in module_code(net).items()}}  # fmt: skip
        if code:  # plain torch modules in a cache of no run keep the keys they always had
            head["code"] = code
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
        touch(path)
        budget.replay(int(entry["used"]), entry["stopped_early"], reused=key[:12])
        return True

    def save(self, key: str, net: nn.Module, budget: StageBudget) -> None:
        """Write atomically: a reader never sees half an entry. Beside it, what it is (the
        stage, and for a shared stage its identity, :func:`share_identity`)."""
        path = self._path(key)
        meta = {"stage": budget.stage.name, "saved": time.time()}
        if budget.stage.share:
            meta["identity"] = share_identity(budget.stage, budget.plan.scope)
        entry = {
            "state": {k: v.detach().cpu() for k, v in net.state_dict().items()},
            "used": budget.used,
            "stopped_early": budget.stopped_early,
            "meta": json.dumps(meta),
        }
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.describe(key, meta)
        except OSError as exc:
            raise write_error(path, exc) from None
        save_atomic(entry, path)  # its own errors name the entry and the cause

    def describe(self, key: str, meta: dict[str, Any]) -> None:
        """Write the entry's description (``<key>.meta.json``) atomically."""
        path = self.root / key[:2] / f"{key}{META_SUFFIX}"
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        try:
            tmp.write_text(json.dumps(meta, sort_keys=True))
            os.replace(tmp, path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise

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
                try:
                    stat = path.stat()
                except FileNotFoundError:  # removed since the listing (another gc)
                    continue
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
        returns the entries deleted. Leases held by live processes are kept, and so are
        the entries under them (being trained, or read by the holder, now)."""
        now = time.time()
        removed = []
        for e in self.entries():
            if now - e.last_used < older_than_s:
                continue
            with self.lease(e.key, wait=False) as held:
                if held is None:
                    continue
                e.path.unlink(missing_ok=True)
                (e.path.parent / f"{e.key}{META_SUFFIX}").unlink(missing_ok=True)
                removed.append(e)
        self.remove_stale_leases()
        for tmp in self.root.glob("*/*.tmp"):
            # A recent one may be an entry being saved right now (torch.save keeps touching
            # it): deleting it would fail that save after hours of training.
            if lease_files.older_than(tmp, lease_files.LEASE_STALE_S):
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
        with self.lease(key, log=log, on_wait=self.waiting(budget.stage.name)):
            if self.restore(key, net, budget):
                return True
            train()
            self.save(key, net, budget)
        return False

    def _lease_path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}{lease_files.LEASE_SUFFIX}"

    def acquire(
        self,
        key: str,
        *,
        wait: bool = True,
        log: Log | None = None,
        on_wait: Callable[[LeaseInfo], None] | None = None,
    ) -> Lease | None:
        """The lease on ``key``; call :meth:`Lease.release` when done (or use it in a
        ``with`` block, or use :meth:`lease`). See :func:`ssilbench.train.leases.acquire`."""
        return lease_files.acquire(self._lease_path(key), key, wait=wait, log=log,
                                   on_wait=on_wait)  # fmt: skip

    @contextmanager
    def lease(
        self,
        key: str,
        wait: bool = True,
        log: Log | None = None,
        on_wait: Callable[[LeaseInfo], None] | None = None,
    ) -> Iterator[Lease | None]:
        """:meth:`acquire` as a context manager: yields the lease (None only without
        ``wait``, while another holds it) and releases it at the end of the block, also
        when the block raises, so that a waiter then trains the stage instead."""
        held = self.acquire(key, wait=wait, log=log, on_wait=on_wait)
        try:
            yield held
        finally:
            if held is not None:
                held.release()

    def leases(self) -> list[LeaseInfo]:
        """The leases on disk, live and stale: the stages being trained now."""
        return lease_files.read_all(self.root)

    def remove_stale_leases(self, watch: bool = False) -> list[LeaseInfo]:
        """Delete the leases whose holders are gone (see :meth:`acquire`); returns them.
        ``watch``: also watch those whose heartbeat is ahead of this host's clock for
        ``LEASE_STALE_S`` and delete the ones whose heartbeat stood still."""
        infos = self.leases()
        removed = lease_files.remove_stale(self.root, infos)
        if watch:
            removed += lease_files.watch_stale(lease_files.ahead_of_clock(infos))
        return removed


def touch(path: Path) -> None:
    """Stamp ``path``'s last use (for ``ssilbench cache gc``). An entry that a concurrent
    ``cache gc`` removed after it was read has served its reader all the same."""
    with contextlib.suppress(FileNotFoundError):
        os.utime(path)


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


class _RequiredFitSettings(TypedDict):
    lr: float
    batch_size: int
    seed: int


class FitSettings(_RequiredFitSettings, total=False):
    """How a supervised stage trains, besides its network, data and step budget: the
    keyword arguments of ``fit_classifier``, ``fit_regressor`` and :func:`stage_key`
    (``lr``, ``batch_size`` and ``seed`` required)."""

    rule: StoppingRule | None
    """Ends the stage early once training has converged (None: never)."""
    schedule: WarmupLinear | None
    """The learning rate over the stage's steps (None: constant)."""
    speed: Speed
    """bf16 autocast and channels-last on CUDA (default: float32)."""


def stage_key(
    cache: StageCache,
    trainer: str,
    net: nn.Module,
    inputs: RowSource,
    targets: RowSource,
    budget: StageBudget,
    **fit: Unpack[FitSettings],
) -> str:
    """The key of one supervised stage (``trainer``: "classifier" or "regressor"), the same
    whether the run is trained alone or stacked with others."""
    settings = {"lr": fit["lr"], "batch": min(fit["batch_size"], len(inputs)),
                "seed": fit["seed"], "steps": budget.stage.steps,
                "rule": repr(fit.get("rule"))}  # fmt: skip
    if fit.get("schedule") is not None:  # keys of unscheduled stages stay as they were
        settings["schedule"] = repr(fit["schedule"])
    if getattr(fit.get("speed"), "enabled", False):  # as must those of float32 stages
        settings["speed"] = repr(fit["speed"])
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
