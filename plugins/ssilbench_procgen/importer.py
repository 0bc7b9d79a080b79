"""``ssilbench data import procgen``: the paper's chunked expert data into TransitionStores.

One store per split: ``<data-root>/procgen/<dataset>/<game>/train`` from the ``train/``
chunks (the dataset methods learn from) and ``.../test`` from the ``test/`` chunks (held-out
expert transitions for offline diagnostics). Frames are copied chunk by chunk, channels
first, so memory holds one chunk at a time whatever the size of the data.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.kit import TransitionStore, TransitionStoreWriter
from ssilbench_procgen.chunks import Chunk, inspect_chunk, list_chunks, read_chunk
from ssilbench_procgen.games import OBS_SHAPE

# Frames converted to channels-first per copy: bounds the extra memory beside a chunk.
_BLOCK = 4096


def inspect_split(folder: Path) -> list[Chunk]:
    """Every chunk of a split folder, checked from its headers (nothing is copied yet)."""
    return [inspect_chunk(path) for path in list_chunks(folder)]


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
