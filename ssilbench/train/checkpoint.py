"""Checkpoints of a run's training state, so that a killed or pre-empted run resumes.

Every ``every`` steps of a stage trained by ``ssilbench.train.loop.optimise`` the run's
training state is written to ``RESULTS/checkpoints/<run id>/<stage>.pt``: the optimised
parameters, the optimiser's state, the minibatch sampler's position and generator, torch's
generator, the step counters and the evaluations so far. A run that starts a stage with a
checkpoint on disk continues from it, and on CPU reaches the same result bit for bit as a
run never interrupted. Stages before it come back through the stage cache
(``ssilbench.train.memo``) or are trained again, deterministically. Files are written
atomically and loaded with ``weights_only=True``; the folder is removed when the run ends.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch


class RunCheckpoints:
    """The checkpoints of one run."""

    def __init__(self, root: str | os.PathLike, every: int, timeline: list[dict[str, Any]]):
        if every < 1:
            raise ValueError("checkpoints need a positive interval")
        self.root = Path(root)
        self.every = every
        self.timeline = timeline  # the run's own list, restored in place

    def _path(self, stage: str) -> Path:
        return self.root / f"{stage}.pt"

    def save(self, stage: str, state: dict[str, Any]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        payload = {**state, "timeline": list(self.timeline), "torch_rng": torch.get_rng_state()}
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                torch.save(payload, f)
            os.replace(tmp, self._path(stage))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load(self, stage: str) -> dict[str, Any] | None:
        path = self._path(stage)
        if not path.is_file():
            return None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a damaged checkpoint: the stage starts over
            return None
        self.timeline[:] = state.pop("timeline")
        torch.set_rng_state(state.pop("torch_rng"))
        return state

    def clear(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
