"""``ssilbench data import procgen``: the paper's chunked expert data into TransitionStores.

One store per split: ``<data-root>/procgen/<dataset>/<game>/train`` from the ``train/``
chunks (the dataset methods learn from) and ``.../test`` from the ``test/`` chunks (held-out
expert transitions for offline diagnostics), each from at most the split's first
``max_chunks`` chunks (the reference reads 80). Frames are copied chunk by chunk, channels
first, so memory holds one chunk at a time whatever the size of the data.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.kit import TransitionStore, TransitionStoreWriter
from ssilbench_procgen.chunks import Chunk, inspect_chunk, list_chunks, read_chunk
from ssilbench_procgen.games import OBS_SHAPE

# Frames converted to channels-first per copy: bounds the extra memory beside a chunk.
_BLOCK = 4096


@dataclass(frozen=True)
class SplitSource:
    """The chunks of a split folder an import copies, and how many the folder holds."""

    chunks: list[Chunk]
    found: int


def inspect_split(folder: Path, max_chunks: int = 0) -> SplitSource:
    """The first ``max_chunks`` chunks of a split folder in numbered order (0: every one),
    checked from their headers (nothing is copied yet); the folder's numbering is checked
    whole."""
    paths = list_chunks(folder)
    kept = paths[:max_chunks] if max_chunks else paths
    return SplitSource([inspect_chunk(path) for path in kept], len(paths))


def import_split(
    chunks: list[Chunk],
    path: Path,
    producer: dict[str, Any],
    metadata: dict[str, Any],
    log: Callable[[str], None] = print,
) -> TransitionStore:
    """Copy the chunks into a store at ``path``; episodes end where ``done`` is True."""
    returns: list[float] = []
    running = 0.0
    with TransitionStoreWriter(path, OBS_SHAPE, np.uint8, producer, metadata) as writer:
        for number, chunk in enumerate(chunks, 1):
            data = read_chunk(chunk)
            for start in range(0, chunk.frames, _BLOCK):
                rows = slice(start, start + _BLOCK)
                writer.append(
                    data.obs[rows].transpose(0, 3, 1, 2),
                    data.actions[rows],
                    data.rewards[rows],
                    data.done[rows],
                )
            # Episode returns from the rewards, for the dataset's reference score.
            cumulative = running + np.cumsum(data.rewards, dtype=np.float64)
            ends = np.flatnonzero(data.done)
            if len(ends):
                totals = cumulative[ends]
                returns += np.diff(np.concatenate([[0.0], totals])).tolist()
                running = float(cumulative[-1] - totals[-1])
            else:
                running = float(cumulative[-1]) if len(cumulative) else running
            del data
            log(f"  {chunk.path.name}: chunk {number}/{len(chunks)}, {writer.num_frames} frames")
        writer.metadata = {
            **metadata,
            "complete_episodes": len(returns),
            "episode_return_mean": float(np.mean(returns)) if returns else None,
        }
        return writer.commit()
