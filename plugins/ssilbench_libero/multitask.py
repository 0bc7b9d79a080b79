"""LIBERO-10 as one multitask dataset: the ten imported per-task stores seen as one store,
without copying a frame.

The paper trains one model on the ten tasks (D_L = N_L demonstrations per task, D_U = every
demonstration), conditioned on the task's language instruction. :func:`open_multitask`
opens the per-task stores and joins them:

- images (``obs``, ``wrist``) are :class:`ConcatRows`: the per-task memory maps read as one
  array (a read of rows touches only the files that hold them);
- the small per-frame arrays (actions, rewards, proprioception) are concatenated in memory
  (~40 bytes a frame);
- ``language``: each frame's conditioning vector, the embedding of its task's instruction
  (:mod:`ssilbench_libero.language`), a broadcast of one row per task (no memory per frame);
- the manifest records the per-task stores' manifests' digests, the embeddings' sha256 and
  ``episode_groups`` (each demonstration's task), which makes the core's split count
  N_L per task (``ssilbench.data.split``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ssilbench.kit import TransitionStore

MULTITASK_FORMAT = "ssilbench-libero10-multitask"


class ConcatRows:
    """Several arrays with equal trailing shapes read as one along their first axis.

    Supports what the readers of a store use: ``len``, ``shape``, ``dtype``, an integer, a
    slice or an integer array (any shape) as index; the result is a new ndarray holding just
    those rows. Converting the whole to an array (``np.asarray``) copies every row: only
    small ones should be."""

    def __init__(self, parts: Sequence[np.ndarray]) -> None:
        if not parts:
            raise ValueError("ConcatRows needs at least one array")
        row = parts[0].shape[1:]
        if any(p.shape[1:] != row or p.dtype != parts[0].dtype for p in parts):
            raise ValueError("ConcatRows: every part needs the same row shape and dtype")
        self.parts = list(parts)
        self.starts = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
        self.dtype = parts[0].dtype
        self.shape = (int(self.starts[-1]), *row)
        self.ndim = len(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        out = self[np.arange(len(self))]
        return out if dtype is None else out.astype(dtype)

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, tuple):  # rows first, then the rest of the index
            return self[key[0]][(slice(None), *key[1:])]
        if isinstance(key, slice):
            return self[np.arange(*key.indices(len(self)))]
        if np.isscalar(key):
            index = int(key)
            if index < 0:
                index += len(self)
            return self[np.array([index])][0]
        index = np.asarray(key)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        flat = index.astype(np.int64).ravel()
        flat = np.where(flat < 0, flat + len(self), flat)
        if len(flat) and (flat.min() < 0 or flat.max() >= len(self)):
            raise IndexError(f"rows outside 0..{len(self) - 1}")
        out = np.empty((len(flat), *self.shape[1:]), dtype=self.dtype)
        part = np.searchsorted(self.starts, flat, side="right") - 1
        for p in np.unique(part):
            sel = np.flatnonzero(part == p)
            local = flat[sel] - self.starts[p]
            # Contiguous rows are read as one block (a pass over a task reads sequentially).
            if len(local) > 1 and np.all(np.diff(local) == 1):
                out[sel] = self.parts[p][local[0] : local[-1] + 1]
            else:
                out[sel] = self.parts[p][local]
        return out.reshape(*index.shape, *self.shape[1:])


def _digest(doc: Any) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def open_multitask(
    stores: Sequence[TransitionStore],
    names: Sequence[str],
    embeddings: np.ndarray,
    conditioning: dict[str, Any],
    root: Path,
) -> TransitionStore:
    """One store over ``stores`` (in task order): frames joined without a copy, each
    episode's group its task, the per-frame ``language`` extra the row of ``embeddings``
    of its task. ``conditioning`` describes the embeddings (kind, encoder) for the manifest."""
    if len(stores) != len(names) or len(stores) != len(embeddings):
        raise ValueError("one store, name and embedding row per task")
    sizes = [s.num_frames for s in stores]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    table = np.ascontiguousarray(embeddings, dtype=np.float32)
    extras: dict[str, Any] = {}
    for name in stores[0].extras:
        parts = [s.extras[name] for s in stores]
        # Images stay in their files; small arrays (proprioception) are joined in memory.
        small = parts[0][0].nbytes <= 1024 if len(parts[0]) else True
        joined = np.concatenate([np.asarray(p) for p in parts]) if small else ConcatRows(parts)
        extras[name] = joined
    extras["language"] = ConcatRows(
        [np.broadcast_to(table[k], (n, table.shape[1])) for k, n in enumerate(sizes)]
    )
    groups = np.concatenate([np.full(s.num_episodes, k) for k, s in enumerate(stores)])
    table_sha = hashlib.sha256(table.tobytes()).hexdigest()
    manifest = {
        "format": MULTITASK_FORMAT,
        "producer": {
            "joined": {n: _digest(s.manifest) for n, s in zip(names, stores, strict=True)}
        },  # fmt: skip
        "frames": int(offsets[-1]),
        "episodes": len(groups),
        "transitions": int(offsets[-1]) - len(groups),
        "files": {
            # The joined arrays' identities: digests of the per-task files' recorded sha256s.
            f"{key}.npy": {"sha256": _digest([s.content_id(key) for s in stores])}
            for key in (
                "obs",
                "actions",
                "rewards",
                "episode_ends",
                *(f"obs.{e}" for e in stores[0].extras),
            )
        }
        | {"obs.language.npy": {"sha256": table_sha}},  # fmt: skip
        "metadata": {
            "tasks": list(names),
            "episode_groups": groups.tolist(),
            "conditioning": {**conditioning, "sha256": table_sha, "dim": int(table.shape[1])},
        },
    }
    return TransitionStore(
        root=Path(root),
        obs=ConcatRows([s.obs for s in stores]),  # type: ignore[arg-type]
        actions=np.concatenate([np.asarray(s.actions) for s in stores]),
        rewards=np.concatenate([np.asarray(s.rewards) for s in stores]),
        episode_ends=np.concatenate(
            [np.asarray(s.episode_ends) + off for s, off in zip(stores, offsets, strict=False)]
        ),
        manifest=manifest,
        extras=extras,
    )


def task_of_frames(store: TransitionStore) -> np.ndarray:
    """Each frame's task index (uint8) in a multitask store, from its episode groups."""
    groups = np.asarray(store.manifest["metadata"]["episode_groups"], dtype=np.uint8)
    lengths = np.diff(np.concatenate([[0], store.episode_ends]))
    return np.repeat(groups, lengths)
