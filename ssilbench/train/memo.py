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
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ssilbench.train.budget import StageBudget
from ssilbench.train.checkpoint import save_atomic

# Bump when a trainer's computation changes, so that older entries are never reused.
FORMAT = 1
SUFFIX = ".stage.pt"


def _digest_tensor(h: Any, t: torch.Tensor) -> None:
    t = t.detach().cpu().contiguous()
    h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
    h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")


@dataclass(frozen=True)
class CacheEntry:
    key: str
    path: Path
    size: int
    last_used: float
    meta: dict[str, Any]


class StageCache:
    """Trained stage weights on disk, one file per key under ``root``."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)

    def key(
        self,
        trainer: str,
        net: nn.Module,
        tensors: Iterable[torch.Tensor],
        settings: dict[str, Any],
        device: torch.device,
    ) -> str:
        """The hash of everything that determines the trained weights."""
        h = hashlib.sha256()
        head = {"format": FORMAT, "trainer": trainer, "device": device.type,
                "torch": torch.__version__.split("+")[0], **settings}  # fmt: skip
        h.update(json.dumps(head, sort_keys=True, default=repr).encode())
        for name, value in net.state_dict().items():
            h.update(name.encode())
            _digest_tensor(h, value)
        for t in tensors:
            _digest_tensor(h, t)
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
        """Write atomically: a reader never sees half an entry."""
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        entry = {
            "state": {k: v.detach().cpu() for k, v in net.state_dict().items()},
            "used": budget.used,
            "stopped_early": budget.stopped_early,
            "meta": json.dumps({"stage": budget.stage.name, "saved": time.time()}),
        }
        save_atomic(entry, path)

    def entries(self) -> list[CacheEntry]:
        out = []
        for path in sorted(self.root.glob(f"*/*{SUFFIX}")):
            try:
                entry = torch.load(path, map_location="cpu", weights_only=True)
                meta = json.loads(entry["meta"])
            except Exception:
                meta = {"damaged": True}
            stat = path.stat()
            out.append(CacheEntry(path.name[: -len(SUFFIX)], path, stat.st_size, stat.st_mtime,
                                  meta))  # fmt: skip
        return out

    def gc(self, older_than_s: float = 0.0) -> list[CacheEntry]:
        """Delete the entries not used for ``older_than_s`` seconds; returns them."""
        now = time.time()
        removed = [e for e in self.entries() if now - e.last_used >= older_than_s]
        for e in removed:
            e.path.unlink(missing_ok=True)
        for tmp in self.root.glob("*/*.tmp"):
            tmp.unlink(missing_ok=True)
        return removed


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
    inputs: torch.Tensor,
    targets: torch.Tensor,
    budget: StageBudget,
    *,
    lr: float,
    batch_size: int,
    seed: int,
    rule: Any,
    schedule: Any = None,
) -> str:
    """The key of one supervised stage (``trainer``: "classifier" or "regressor"), the same
    whether the run is trained alone or stacked with others."""
    settings = {"lr": lr, "batch": min(batch_size, len(inputs)), "seed": seed,
                "steps": budget.stage.steps, "rule": repr(rule)}  # fmt: skip
    if schedule is not None:  # keys of unscheduled stages stay as they were
        settings["schedule"] = repr(schedule)
    return cache.key(trainer, net, [inputs, targets], settings, inputs.device)


def reuse_or_train(
    trainer: str,
    net: nn.Module,
    tensors: list[torch.Tensor],
    settings: dict,
    budget: StageBudget,
    device: torch.device,
    train: Callable[[], None],
) -> bool:
    """Restore ``net`` from the stage cache when an identical stage was trained before,
    else ``train()`` it and keep the result. Returns whether it was reused.

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
    if cache.restore(key, net, budget):
        return True
    train()
    cache.save(key, net, budget)
    return False
