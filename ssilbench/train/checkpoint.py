"""Checkpoints of a run's training state, so that a killed or pre-empted run resumes.

Every ``every`` steps of a stage trained by ``ssilbench.train.loop.optimise`` the run's
training state is written to ``RESULTS/checkpoints/<run id>/<stage>.pt``: the optimised
parameters, the optimiser's state, the minibatch sampler's position and generator, torch's
generator, the step counters, the evaluations so far and the run's wall time so far. A run
that starts a stage with a checkpoint on disk continues from it, and on CPU reaches the same
result bit for bit as a run never interrupted. Stages before it come back through the stage
cache (``ssilbench.train.memo``) or are trained again, deterministically. Files are written
atomically and loaded with ``weights_only=True``; the folder is removed when the run ends.

A resumed run's wall time counts its earlier attempts up to the checkpoint it went on from
(the work after that checkpoint is done again, so it is counted once): a study's summed wall
time is then what an uninterrupted sweep would take.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from ssilbench.errors import DISK_FULL_TEXTS, ResultsStoreError, os_error_message


def save_atomic(payload: dict[str, Any], path: Path) -> None:
    """``torch.save`` to a temporary file beside ``path``, then rename it into place: a reader
    sees the old file or the new one, never half of one. An OS error (a full or read-only
    disk, a file in the way; torch reports a full disk as a RuntimeError) removes the
    temporary file and becomes one ResultsStoreError naming ``path`` and the cause."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if is_write_error(exc):
            raise write_error(path, exc) from None
        raise


def is_write_error(exc: BaseException) -> bool:
    """An OS error, or torch's RuntimeError for a write that failed (a full disk)."""
    text = str(exc)
    return isinstance(exc, OSError) or (
        isinstance(exc, RuntimeError) and any(marker in text for marker in DISK_FULL_TEXTS)
    )


def write_error(path: Path, exc: BaseException) -> ResultsStoreError:
    return ResultsStoreError(os_error_message(path, exc))


CHECKPOINTS = "checkpoints"
"""The folder of a results directory that holds one folder of checkpoints per run id."""


def saved_steps(folder: Path) -> dict[str, int]:
    """Stage -> the step of that stage's checkpoint in one run's ``folder``: how far a
    running run has got, read without restoring anything. Unreadable files are left out."""
    steps = {}
    for path in sorted(folder.glob("*.pt")) if folder.is_dir() else []:
        try:  # mmap: only the small entries are read, not the saved weights
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            steps[path.stem] = int(state["used"])
        except Exception:  # being replaced, damaged, or not a checkpoint
            continue
    return steps


def _starts_over(path: Path, why: str) -> None:
    """Say that a checkpoint is passed over: hours of training can go with it, and a stage
    that starts over without a word looks like one that resumed."""
    print(f"checkpoint {path}: not resumed, {why}; its stage starts over from step 0",
          file=sys.stderr, flush=True)  # fmt: skip


class RunCheckpoints:
    """The checkpoints of one run."""

    def __init__(
        self,
        root: str | os.PathLike,
        every: int,
        timeline: list[dict[str, Any]],
        device: str | None = None,
    ):
        if every < 1:
            raise ValueError("checkpoints need a positive interval")
        self.root = Path(root)
        self.every = every
        self.timeline = timeline  # the run's own list, restored in place
        self.device = device
        """The device this attempt trains on, as the run records it; each checkpoint keeps
        the devices of the attempts up to it, so a run that went on from one on another
        device says where it began."""
        self.earlier_devices: list[str] = []
        """The devices of the attempts before this one (from the checkpoint it went on
        from), oldest first; empty when it did not resume or its checkpoint recorded none."""
        self.resumed_devices: dict[str, list[str]] = {}
        """Stage -> the devices recorded in the checkpoint the stage went on from."""
        self.share = 1
        """How many runs this attempt trains together (a stacked unit): the run's wall time
        is its share of the attempt's."""
        self.earlier = 0.0
        """Seconds of earlier attempts in the run's wall time: what the run had spent when it
        saved the checkpoint it went on from, less what this attempt spent to get back there
        (negative when getting back took longer)."""
        self.resumed_seconds: dict[str, float] = {}
        """Stage -> the run's wall time recorded in the checkpoint the stage went on from."""
        self._began = time.perf_counter()
        self._unknown = False  # resumed from a checkpoint that did not record the time
        self.before_save: Callable[[], None] | None = None
        """Called before saving: e.g. waiting for an evaluation still running."""

    def _path(self, stage: str) -> Path:
        return self.root / f"{stage}.pt"

    def seconds(self) -> float:
        """The run's wall time so far, earlier attempts included."""
        return self.earlier + (time.perf_counter() - self._began) / self.share

    def save(self, stage: str, state: dict[str, Any]) -> None:
        if self.before_save is not None:
            self.before_save()
        seconds = None if self._unknown else self.seconds()
        payload = {**state, "timeline": list(self.timeline), "torch_rng": torch.get_rng_state(),
                   "seconds": seconds, "devices": self.devices()}  # fmt: skip
        save_atomic(payload, self._path(stage))

    def devices(self) -> list[str]:
        """The devices of the run's attempts up to now, oldest first, each once in a row."""
        chain = list(self.earlier_devices)
        if self.device is not None and (not chain or chain[-1] != self.device):
            chain.append(self.device)
        return chain

    def load(self, stage: str, format: str | None = None) -> dict[str, Any] | None:
        """The stage's saved state, timeline and torch generator restored; None (nothing
        restored) when there is none, it is damaged, or it was written by another trainer:
        ``format`` is the ``"format"`` entry its trainer saves (None: ``optimise``'s)."""
        path = self._path(stage)
        if not path.is_file():
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:  # a damaged checkpoint: the stage starts over
            _starts_over(path, f"it does not load ({type(exc).__name__})")
            return None
        if state.get("format") != format:  # another trainer's state: the stage starts over
            used = state.get("used")
            at = f" at step {used:,}" if isinstance(used, int) else ""
            _starts_over(path, f"another trainer wrote it{at}")
            return None
        self.timeline[:] = state.pop("timeline")
        torch.set_rng_state(state.pop("torch_rng"))
        self.earlier_devices = [str(d) for d in state.pop("devices", None) or []]
        if self.earlier_devices:
            self.resumed_devices[stage] = list(self.earlier_devices)
        else:
            self.resumed_devices.pop(stage, None)
        # None: the time before it is unknown (a checkpoint written before checkpoints
        # recorded it); so are the times of the checkpoints the run saves after it.
        seconds = state.pop("seconds", None)
        self._unknown = seconds is None
        if seconds is None:
            self.earlier = 0.0
            self.resumed_seconds.pop(stage, None)
        else:
            self.earlier = float(seconds) - (time.perf_counter() - self._began) / self.share
            self.resumed_seconds[stage] = float(seconds)
        return state

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
